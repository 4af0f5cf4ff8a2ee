"""The cyclic garbage collector paused around a simulation (the engine's run, and `simulate` as
a whole: a sweep's gen-0/1/2 collections over timeline tuples cost 13 % of its warm time)."""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def no_gc():
    """Pause the cyclic garbage collector: a large run allocates millions of small tuples that
    hold no cycles, and full collections over them tripled the run time at 4096 ranks. On the way
    out, what the run allocated is moved to the oldest generation unscanned (freeze, then
    unfreeze: two list splices), so the first young collection after it does not walk every
    timeline tuple the run kept (about 5 % of the engine's time in benchmarks/sim_speed.py's
    full-mode case); a later full collection still sees them, cycles included. Skipped when the
    process already froze objects of its own."""
    was = gc.isenabled()
    frozen = gc.get_freeze_count()        # objects someone else froze (e.g. before a fork) stay so
    gc.disable()
    try:
        yield
    finally:
        if not frozen:
            gc.freeze()
            gc.unfreeze()
        if was:
            gc.enable()
