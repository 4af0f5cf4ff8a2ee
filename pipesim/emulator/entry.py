"""Entry of one process started by the launcher: die with the launcher, turn SIGTERM into a
clean stop that keeps what was recorded, run the requested mode, report a failure to a file.

Modes (cfg["mode"]): "emulate" (worker.run_worker, the default) and "torch_pipelining" (the
reference runtime, torch_pipelining.run_torch_pipelining). The launcher imports this module and
nothing it imports imports the launcher back.
"""
from __future__ import annotations

import json
import os
import sys
import traceback

from pipesim.emulator import recorder as recorder_mod
from pipesim.emulator.host import die_with_parent

PARENT_ENV = "PIPESIM_LAUNCHER_PID"


def _on_term(signum, frame):
    """The launcher stops a run with SIGTERM: keep what this rank recorded, then die."""
    rec = recorder_mod.ACTIVE.get("recorder")
    try:
        if rec is not None:
            rec.close()
    finally:
        os._exit(128 + signum)


def write_error(cfg: dict, exc: BaseException) -> None:
    rec = recorder_mod.ACTIVE.get("recorder")
    if rec is not None:
        try:
            rec.close()
        except Exception:   # noqa: BLE001 - the error report matters more
            pass
    run_dir = cfg.get("run_dir")
    rank = int(os.environ.get("RANK", -1))
    st = recorder_mod.Status.read(os.path.join(run_dir, f"rank{rank}.status")) if run_dir else None
    info = {"rank": rank, "type": type(exc).__name__,
            "message": next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), ""),
            "action": (st or {}).get("action"), "step": (st or {}).get("step"),
            "traceback": traceback.format_exc(limit=8)}
    if run_dir:
        with open(os.path.join(run_dir, f"rank{rank}.error.json"), "w") as fh:
            json.dump(info, fh)
    sys.stderr.write(f"pipesim emulator rank {rank}: {info['type']}: {info['message']} in action "
                     f"{info['action']} (step {info['step']})\n{info['traceback']}")


def worker_main(cfg: dict) -> int:
    """Run one rank; results go to files in cfg['run_dir']. Never returns normally: the process
    exits without interpreter and process-group teardown (seconds with gloo and torch loaded)."""
    import signal
    parent = os.environ.get(PARENT_ENV)
    die_with_parent(int(parent) if parent else None)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    try:
        if cfg.get("mode") == "torch_pipelining":
            from pipesim.emulator.torch_pipelining import run_torch_pipelining
            run_torch_pipelining(cfg)
        else:
            from pipesim.emulator.worker import run_worker
            run_worker(cfg)
    except BaseException as exc:   # report, then die without waiting on peers
        write_error(cfg, exc)
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
