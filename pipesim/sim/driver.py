"""How the SimPy engine's generators run on SimPy's event queue: same-instant priorities, events
due at exact times, the inlined event loop and a lean process driver. simpy is imported by
`bind_simpy()` (called by Engine()) only, so the DAG path, which never builds events, never
loads it."""
from __future__ import annotations

from heapq import heappop, heappush


# Same-instant order. SimPy runs events of one time by (priority, creation order). The data-parallel
# stream's wake-ups use a priority after NORMAL, so at any instant every rank action (its sends'
# port reservations included) precedes that rank's DP bucket reservations: a deterministic rule the
# DAG fast path (sim/dag.py) reproduces without an event queue.
URGENT = 0                  # simpy.events.URGENT (a Process starts at this priority)
NORMAL = 1                  # simpy.events.NORMAL (checked by bind_simpy)
DP_PRIORITY = NORMAL + 1
_Event = None               # simpy.events.Event, bound by bind_simpy()


def at(env, t: float, priority: int = NORMAL):
    """An event firing at absolute time `t` (a Timeout would land on now + (t - now), which can
    differ from t in the last bit; messages and buckets are due at exact times)."""
    ev = ready_event(env)
    heappush(env._queue, (t, priority, next(env._eid), ev))
    return ev


def bind_simpy() -> None:
    """Import simpy's Event for the functions here (and check its priority constants)."""
    global _Event
    from simpy.events import NORMAL as SIMPY_NORMAL, URGENT as SIMPY_URGENT, Event
    assert (SIMPY_NORMAL, SIMPY_URGENT) == (NORMAL, URGENT), "simpy changed its priority constants"
    _Event = Event


def ready_event(env):
    """An event already marked successful: pushed on the queue by hand, it fires when due."""
    ev = _Event(env)
    ev._ok = True
    ev._value = None
    return ev


def run_queue(env) -> None:
    """`env.run()` until the queue drains, with SimPy's `Environment.step` inlined (one Python
    call less per event): pop the earliest (time, priority, event id), run its callbacks, crash
    on a failed event nobody handled (what `step` does)."""
    queue = env._queue
    while queue:
        env._now, _, _, ev = heappop(queue)
        callbacks, ev.callbacks = ev.callbacks, None
        for callback in callbacks:
            callback(ev)
        if not ev._ok and not hasattr(ev, "_defused"):
            raise ev._value


def release_env(env) -> None:
    """Drop the bound event factories SimPy's Environment keeps on itself (`env.event`,
    `env.timeout`, ...: each refers back to env), a reference cycle that would otherwise wait for a
    full collection. The environment cannot create events afterwards; its clock and queue stay."""
    for name in [k for k, v in vars(env).items() if getattr(v, "__self__", None) is env]:
        delattr(env, name)


class Proc:
    """Drives one engine generator on SimPy's event queue, in place of `simpy.Process`: its
    resume callback sends None (the engine's generators read what they wait for from the events
    themselves, never the sent value) and hooks itself onto the next event, looping at once past
    events already processed, as Process does. Process's generality (interrupts, failed events
    thrown into the generator, the active-process bookkeeping) is unused here: events never fail
    (run_queue raises if one does). Started like a Process: an URGENT event at the current time,
    so start order and event ids match SimPy's. With `armed`, the generator may instead set an
    event's callbacks to that list (holding this resume) itself and yield None: one shared list,
    nothing built or appended per wait (run_queue only reads a callback list)."""
    __slots__ = ("_generator", "is_alive", "_resume")

    def __init__(self, env, generator, armed: list | None = None):
        self._generator = generator
        self.is_alive = True
        send = generator.send

        def resume(_event):
            nonlocal resume
            while True:
                try:
                    event = send(None)
                except StopIteration:
                    # the closure refers to itself (and this Proc to it): reference cycles that
                    # only a full collection would free, and simulate() pauses the collector
                    self.is_alive = False
                    self._resume = resume = None
                    return
                if event is None:          # the generator armed its own event with `armed`
                    return
                callbacks = event.callbacks
                if callbacks is not None:
                    callbacks.append(resume)
                    return

        if armed is not None:
            armed.append(resume)

        self._resume = resume
        start = ready_event(env)
        start.callbacks = [resume]
        env.schedule(start, URGENT)

    def close(self) -> None:
        """End a generator left waiting (a DP stream asleep at the end of the step): closed, its
        next send raises StopIteration, which releases the driver's cycles as a finished one does."""
        if self.is_alive:
            self._generator.close()
            self._resume(None)
