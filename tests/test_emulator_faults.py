"""A rank that raises, hangs or dies ends the whole run within the bound, with an error naming
the rank and the action it was in, no processes left behind, and the others' traces kept."""
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

from pipesim.emulator import emulate  # noqa: E402
from pipesim.emulator.faults import ENV, parse_fault  # noqa: E402
from pipesim.emulator.launcher import EmulationError  # noqa: E402
from pipesim.errors import PipesimError  # noqa: E402

TINY = os.path.join(os.path.dirname(__file__), "..", "scenarios", "emulator", "tiny_1f1b.yaml")


def workers_of(run_dir):
    """PIDs of processes still running a worker of this run (matched by its config path)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if os.path.join(run_dir, "config.json") in ln]


def run_with_fault(tmp_path, monkeypatch, fault, timeout=3.0):
    monkeypatch.setenv(ENV, fault)
    t0 = time.monotonic()
    with pytest.raises(EmulationError) as info:
        emulate(TINY, steps=1, warmup=0, timeout=timeout, run_dir=str(tmp_path))
    return info.value, time.monotonic() - t0


@pytest.mark.parametrize("mode,words", [("raise", "raised InjectedFault"), ("exit", "died with exit code 3")])
def test_rank_failure_names_rank_and_action(tmp_path, monkeypatch, mode, words):
    # a generous progress timeout: a loaded machine must not turn the injected fault into a stall
    err, elapsed = run_with_fault(tmp_path, monkeypatch, f"rank=1,action=1F2,mode={mode}", timeout=20.0)
    msg = str(err)
    assert "rank 1 " + words in msg and "1F2" in msg
    assert elapsed < 60
    assert workers_of(str(tmp_path)) == []
    # the other rank's partial trace is kept; a rank that raised also keeps its own (one that
    # died abruptly cannot write what it had not yet written)
    kept = {(e["rank"], e["kind"], e["microbatch"]) for e in err.partial["events"]}
    assert (0, "F", 0) in kept
    if mode == "raise":
        assert (1, "F", 1) in kept and (1, "F", 2) not in kept


def test_hanging_rank_is_stopped_after_the_timeout(tmp_path, monkeypatch):
    err, elapsed = run_with_fault(tmp_path, monkeypatch, "rank=0,action=0F3,mode=hang", timeout=3.0)
    msg = str(err)
    assert "rank 0 made no progress for 3 s in action 0F3" in msg
    assert "rank 1" in msg            # the other rank is named with where it waits
    assert 3.0 < elapsed < 60
    assert workers_of(str(tmp_path)) == []


def test_fault_spec_is_validated():
    assert parse_fault("rank=2,action=0B1,mode=hang,step=3").step == 3
    for bad in ("rank=1", "rank=x,action=1F0", "rank=1,action=1F0,mode=melt", "nonsense"):
        with pytest.raises(PipesimError):
            parse_fault(bad)


def test_cli_reports_fault_in_one_line(tmp_path):
    env = dict(os.environ, **{ENV: "rank=1,action=1F0,mode=raise"})
    p = subprocess.run([sys.executable, "-m", "pipesim", "emulate", TINY, "--steps", "1", "--warmup", "0",
                        "--timeout", "5", "--run-dir", str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "rank 1 raised InjectedFault" in lines[0] and "1F0" in lines[0]
    assert "Traceback" not in p.stderr


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_to_launcher_stops_its_ranks_within_2s(tmp_path, sig):
    import signal
    from pipesim.emulator.recorder import Status
    launcher = subprocess.Popen([sys.executable, "-m", "pipesim", "emulate", TINY, "--steps", "500",
                                 "--warmup", "0", "--run-dir", str(tmp_path)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:      # both ranks inside the measured steps
            st = [Status.read(str(tmp_path / f"rank{r}.status")) for r in (0, 1)]
            if all(s and s.get("step", -1) >= 1 for s in st):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the ranks never started")
        pids = [s["pid"] for s in st]
        assert len(pids) >= 2 and all(_alive(p) for p in pids)
        launcher.send_signal(getattr(signal, sig))
        time.sleep(2.0)
        assert [p for p in pids if _alive(p)] == []
        assert launcher.wait(timeout=10) != 0
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_timeout_ends_the_run_soon_after_the_hang(tmp_path, monkeypatch):
    """--timeout 5: the run ends at most 2 s after the timeout has passed since the hang began
    (start-up before the hang is not part of the bound)."""
    from pipesim.emulator.recorder import Status
    err, elapsed = run_with_fault(tmp_path, monkeypatch, "rank=0,action=0F0,mode=hang", timeout=5.0)
    end = time.monotonic()
    hung_since = Status.read(str(tmp_path / "rank0.status"))["t"]     # CLOCK_MONOTONIC, shared
    assert "rank 0 made no progress for 5 s in action 0F0" in str(err)
    assert 5.0 <= end - hung_since <= 7.0
    assert workers_of(str(tmp_path)) == []
