"""Where an emulator process runs on its host: CPU priority, core pinning, dying with the launcher.

On a shared machine the ranks' wall time includes whatever other processes take from their cores.
Two levers keep the measurement about the emulator itself:
- priority (`raise_priority`): a lower nice value for the process and, with CONFIG_SCHED_AUTOGROUP
  (on by default), for its scheduler autogroup -- each session competes as one group, so a process
  nice value alone changes nothing against other sessions (sched(7), "The autogroup feature");
- pinning (`pin_to_core`): rank r on core r mod cores, so a rank's gloo threads run on its own core
  (their CPU time is charged to that rank, as the host model assumes) and ranks do not migrate.
"""
from __future__ import annotations

import os
import threading
import time


def raise_priority(n: int) -> bool:
    """Lower this process's nice value by n (root only), also for its scheduler autogroup.
    Returns False when not permitted (the run goes on at normal priority)."""
    if not n:
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -abs(n))
    except (PermissionError, OSError):
        return False
    try:
        with open("/proc/self/autogroup", "w") as fh:
            fh.write(str(-abs(n)))
    except OSError:
        pass
    return True


def usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def pin_to_core(rank: int) -> int | None:
    """Pin this process (and the threads it starts later) to one core: rank r -> the r-th usable
    core, modulo their number. Returns the core, or None where affinity is not supported."""
    cores = usable_cores()
    core = cores[rank % len(cores)]
    try:
        os.sched_setaffinity(0, {core})
    except (AttributeError, OSError):
        return None
    return core


def layout(nproc: int, threads: int) -> dict:
    """The process/thread layout of a run, as the host model describes it."""
    cores = len(usable_cores())
    return {"cores": cores, "ranks": nproc, "threads_per_rank": threads,
            "oversubscription": max(1.0, nproc * threads / cores)}


def die_with_parent(parent_pid: int | None = None, poll_s: float = 0.2) -> None:
    """End this process when the launcher ends, however it ends.

    PR_SET_PDEATHSIG (Linux prctl) covers a directly started child; a forkserver child's parent
    is the fork server, which outlives a killed launcher by tens of seconds, so a daemon thread
    also polls the launcher's pid (given in the environment) and exits when it is gone."""
    try:
        import ctypes
        import signal
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)      # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if not parent_pid:
        return

    def watch():
        while True:
            time.sleep(poll_s)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(128 + 15)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="pipesim-parent-watch", daemon=True).start()
