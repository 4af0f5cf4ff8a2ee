"""Start N emulator processes on this machine, watch them, and end the run cleanly on a fault.

Each worker is `python -m pipesim.emulator --worker CONFIG` with torchrun's environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free loopback port). Workers run
in their own session and die with the launcher (entry.worker_main: PR_SET_PDEATHSIG plus a
watch on the launcher's pid). The launcher polls exit codes and each rank's status record: a rank
that exits non-zero, or a run in which no rank makes progress for `timeout` seconds, stops every
process (SIGTERM, then SIGKILL) and raises EmulationError naming the rank and the action it was
in; the JSONL traces written so far stay. SIGTERM or SIGINT to the launcher stops the ranks the
same way before the launcher itself ends.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pipesim.emulator.entry import PARENT_ENV
from pipesim.emulator.recorder import Status
from pipesim.errors import PipesimError

POLL_S = 0.05
STARTUP_S = 120.0      # a rank still starting (imports) or calibrating gets this long
# After a failure, how long the others get to exit by themselves after SIGTERM (a rank whose main
# thread is inside a gloo wait cannot run its handler, and gets SIGKILL); its recorder writes per
# step, so little is lost.
GRACE_S = 0.3


class EmulationError(PipesimError):
    """A rank raised, died or hung; `partial` holds the merged partial results."""

    def __init__(self, message: str, partial: dict | None = None):
        super().__init__(message)
        self.partial = partial or {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


# Worker start: "forkserver" forks every worker from one server process that has imported torch
# and pipesim once (a launch then costs no interpreter start-up per rank); "subprocess" runs a
# fresh `python -m pipesim.emulator --worker` per rank.
START_METHODS = ("forkserver", "subprocess")
_PRELOAD = ["torch", "torch.distributed", "torch.fx.experimental.symbolic_shapes", "pipesim.emulator.entry",
            "pipesim.emulator.worker", "pipesim.emulator.executor", "pipesim.emulator.model",
            "pipesim.scenario_load", "pipesim.schedules"]


class _Forked:
    """A forkserver child with the small part of Popen's interface the launcher uses."""

    def __init__(self, proc):
        self.proc = proc
        self.pid = proc.pid

    def poll(self):
        return self.proc.exitcode

    def wait(self, timeout=None):
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            raise subprocess.TimeoutExpired("worker", timeout)
        return self.proc.exitcode


def _forked_child(cfg_path: str, env: dict, log_path: str) -> None:
    os.setsid()
    os.environ.clear()          # the launcher's environment now, not the fork server's at its start
    os.environ.update(env)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from pipesim.emulator.entry import worker_main
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    worker_main(cfg)


def start_forkserver() -> None:
    """Start the fork server now (it imports torch in its own process) so that its start-up
    overlaps the caller's own work (loading the scenario, planning) instead of following it."""
    import multiprocessing as mp
    from multiprocessing import forkserver
    mp.get_context("forkserver").set_forkserver_preload(_PRELOAD)
    forkserver.ensure_running()


def _start(method: str, cfg_path: str, env: dict, log_path: str):
    if method == "forkserver":
        import multiprocessing as mp
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        p = ctx.Process(target=_forked_child, args=(cfg_path, dict(os.environ, **env), log_path), daemon=False)
        # Workers need nothing from the caller's __main__: hide it so the child does not re-run
        # the caller's script (multiprocessing's spawn preparation would, and fails for stdin).
        main = sys.modules["__main__"]
        saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
        main.__dict__.pop("__file__", None)
        main.__dict__["__spec__"] = None
        try:
            p.start()
        finally:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)
        return _Forked(p)
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, "-m", "pipesim.emulator", "--worker", cfg_path],
                                env=dict(os.environ, **env), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _signal(p, sig) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            _signal(p, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.01, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            _signal(p, signal.SIGKILL)
            p.wait()


class _Signalled(BaseException):
    """SIGTERM/SIGINT reached the launcher while it watched its ranks."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum, frame):
    raise _Signalled(signum)


def _catch_signals() -> dict:
    """Turn SIGTERM/SIGINT into _Signalled so the ranks are stopped first (main thread only)."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _raise_signalled) for sig in (signal.SIGTERM, signal.SIGINT)}


def _resend(signum: int, previous: dict) -> None:
    """Restore the caller's handlers and deliver the signal again: the launcher ends as the
    caller asked (KeyboardInterrupt for SIGINT, the default SIGTERM action or the caller's)."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    os.kill(os.getpid(), signum)


def _status(run_dir: str, n: int) -> list[dict | None]:
    return [Status.read(os.path.join(run_dir, f"rank{r}.status")) for r in range(n)]


def _where(st: dict | None) -> str:
    if not st:
        return "during start-up"
    action = st.get("action")
    if action == "INIT":
        return "during start-up"
    return f"in action {action} (step {st.get('step')})"


def _stderr_tail(run_dir: str, rank: int, lines: int = 3) -> str:
    try:
        with open(os.path.join(run_dir, f"rank{rank}.log")) as fh:
            tail = [ln.rstrip() for ln in fh.readlines() if ln.strip()][-lines:]
        return " | ".join(tail)
    except OSError:
        return ""


def launch(cfg: dict, nproc: int, timeout: float = 60.0, run_dir: str | None = None,
           start: str = "forkserver") -> dict:
    """Run `nproc` workers with `cfg`; returns the merged results (see results.merge)."""
    if start not in START_METHODS:
        raise PipesimError(f"worker start method {start!r} unknown; expected one of {', '.join(START_METHODS)}")
    from pipesim.emulator.results import merge
    run_dir = run_dir or tempfile.mkdtemp(prefix="pipesim-emu-")
    os.makedirs(run_dir, exist_ok=True)
    # torch's own collective timeout comes after ours, so a hang is reported by the watcher (which
    # names the stuck rank) rather than as a peer's time-out.
    cfg = dict(cfg, run_dir=run_dir, timeout=timeout, pg_timeout=timeout + 30.0)
    cfg_path = os.path.join(run_dir, "config.json")
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh)
    port = free_port()
    procs = []
    for r in range(nproc):
        env = dict(RANK=str(r), WORLD_SIZE=str(nproc), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS=str(cfg.get("threads", 1)),
                   GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"), **{PARENT_ENV: str(os.getpid())})
        procs.append(_start(start, cfg_path, env, os.path.join(run_dir, f"rank{r}.log")))
    error = None
    last_seq, last_change = [None] * nproc, time.monotonic()
    previous = _catch_signals()
    try:
        while True:
            codes = [p.poll() for p in procs]
            if all(c == 0 for c in codes):
                break
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                error = _failure(run_dir, procs, bad, codes)
                break
            st = _status(run_dir, nproc)
            seqs = [s.get("seq") if s else None for s in st]
            # start-up and the in-rank calibration (seconds without a status update) get STARTUP_S
            starting = any(x is None or str(x.get("action")).startswith(("INIT", "CALIBRATE")) for x in st)
            limit = max(timeout, STARTUP_S) if starting else timeout
            if seqs != last_seq:
                last_seq, last_change = seqs, time.monotonic()
            elif time.monotonic() - last_change > limit:
                error = _hang(st, limit)
                break
            time.sleep(POLL_S)
    except _Signalled as sig:
        _stop(procs)
        _resend(sig.signum, previous)
        raise EmulationError(f"emulation stopped by signal {sig.signum}; partial traces in {run_dir}") from None
    finally:
        _stop(procs)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if error is not None:
            partial = merge(run_dir, nproc, cfg)
            raise EmulationError(f"emulation stopped: {error}; partial traces in {run_dir}", partial)
    return merge(run_dir, nproc, cfg)


def _failure(run_dir, procs, bad, codes) -> str:
    # Give the others a moment: the first failure is the cause, the rest usually follow it.
    time.sleep(0.2)
    infos = {}
    for r in range(len(procs)):
        path = os.path.join(run_dir, f"rank{r}.error.json")
        if os.path.exists(path):
            try:
                with open(path) as fh:
                    infos[r] = json.load(fh)
            except (OSError, ValueError):
                pass
    # Prefer a rank that raised something other than a communication error caused by a peer.
    def rank_key(r):
        info = infos.get(r, {})
        peer_caused = any(w in (info.get("message", "") + info.get("type", "")).lower()
                          for w in ("connection", "gloo", "timed out", "closed", "peer"))
        return (peer_caused, r not in bad, r)
    cands = sorted(set(bad) | set(infos), key=rank_key)
    r = cands[0]
    running = [q for q, p in enumerate(procs) if p.poll() is None]
    if rank_key(r)[0] and running:
        # only peers' time-outs/disconnects: the cause is a rank still stuck somewhere
        st = _status(run_dir, len(procs))
        stuck = min(running, key=lambda q: (st[q] or {}).get("t", 0.0))
        age = time.monotonic() - (st[stuck] or {}).get("t", time.monotonic())
        return (f"rank {stuck} made no progress for {age:.0f} s {_where(st[stuck])} "
                f"(rank {r} gave up waiting for it: {infos.get(r, {}).get('message', '')[:120]})")
    st = Status.read(os.path.join(run_dir, f"rank{r}.status"))
    if r in infos:
        i = infos[r]
        where = f"in action {i['action']} (step {i['step']})" if i.get("action") not in (None, "INIT") else "during start-up"
        return f"rank {r} raised {i['type']}: {i['message']} {where}"
    code = codes[r]
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"died with exit code {code}"
    tail = _stderr_tail(run_dir, r)
    return f"rank {r} {how} {_where(st)}" + (f" [{tail}]" if tail and code != 3 else "")


def _hang(st: list[dict | None], timeout: float) -> str:
    """Name the rank stuck longest in a compute action (the others wait on it in RECV/collectives)."""
    waiting_kinds = ("RECV", "DP", "SEND", "STEP")
    candidates = [(s.get("t", 0.0), r) for r, s in enumerate(st)
                  if s and not any(k in str(s.get("action")) for k in waiting_kinds) and s.get("phase") == "run"]
    if not candidates:
        candidates = [((s or {}).get("t", 0.0), r) for r, s in enumerate(st)]
    _, r = min(candidates)
    others = "; ".join(f"rank {q} {_where(s)}" for q, s in enumerate(st) if q != r)
    return (f"rank {r} made no progress for {timeout:g} s {_where(st[r])}"
            + (f" (others: {others})" if others else ""))
