"""Per-rank memory timeline: bytes by category, peak, and samples.

Categories: weights, gradients, optimizer (static, from StageCosts after ZeRO sharding),
activations (allocated when F starts, freed when B ends; with an I/W split the part W does not
need is freed when I ends, the rest when W ends, see workload.w_fraction), recompute (working
set of a recomputed backward, or from an explicit R until its backward ends), buffers (p2p send
and receive buffers, ZeRO-3 gathered weights).

Changes are logged as (time, ((category, delta), ...)) — a send buffer's release is known when
the send is issued, ahead of the clock — and replayed in time order (stable, so same-time
changes keep their program order) to get the peak and the samples.
"""
from __future__ import annotations

from operator import itemgetter

CATEGORIES = ("weights", "gradients", "optimizer", "activations", "recompute", "buffers", "cp_buffers")


class MemoryTracker:
    __slots__ = ("static", "log", "peak", "peak_by", "samples")

    def __init__(self, static: dict):
        self.static = dict.fromkeys(CATEGORIES, 0.0)
        self.static.update(static)
        self.log: list = []
        self.peak = 0.0
        self.peak_by: dict = {}
        self.samples: list = []

    def add(self, cat: str, delta: float, when: float) -> None:
        if delta:
            self.log.append((when, ((cat, delta),)))

    def finish(self, record: bool) -> None:
        if not record:
            return self._peak_only()
        cur = dict(self.static)
        total = sum(cur.values())
        self.peak, self.peak_by = total, dict(cur)
        samples = [(0.0, total, dict(cur))] if record else None
        for when, changes in sorted(self.log, key=itemgetter(0)):
            for cat, delta in changes:
                cur[cat] += delta
                total += delta
            if total > self.peak:
                self.peak = total
                self.peak_by = dict(cur)
            if record:
                if samples[-1][0] == when:
                    samples[-1] = (when, total, dict(cur))
                else:
                    samples.append((when, total, dict(cur)))
        self.samples = samples or []

    def _peak_only(self) -> None:
        """Peak and its breakdown without samples (vectorised: sweeps run this per rank)."""
        import numpy as np
        cur = dict(self.static)
        base = sum(cur.values())
        self.peak, self.peak_by = base, dict(cur)
        if not self.log:
            return
        log = sorted(self.log, key=itemgetter(0))
        # same left-to-right sums as the sampled replay, so both give bit-identical peaks
        deltas = [d for _, changes in log for _, d in changes]
        ends = np.cumsum([len(changes) for _, changes in log])     # entry i ends after delta ends[i]-1
        totals = np.cumsum([base] + deltas)[ends]
        i = int(np.argmax(totals))
        if totals[i] > base:
            self.peak = float(totals[i])
            for _, changes in log[:i + 1]:
                for cat, d in changes:
                    cur[cat] += d
            self.peak_by = cur
