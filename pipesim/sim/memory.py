"""Per-rank memory timeline: bytes by category, peak, and samples.

Categories: weights, gradients, optimizer (static, from StageCosts after ZeRO sharding),
activations (allocated when F starts, freed when B ends; with an I/W split the part W does not
need is freed when I ends, the rest when W ends, see workload.w_fraction), recompute (working
set of a recomputed backward, or from an explicit R until its backward ends), buffers (p2p send
and receive buffers, ZeRO-3 gathered weights), workspace (what a pass holds beyond its kept
activations while it runs: the loss's logit copies, FSDP2's gathered root unit; costs/workspace.py).

Changes are logged as (time, ((category, delta), ...)) — a send buffer's release is known when
the send is issued, ahead of the clock — and replayed in time order (stable, so same-time
changes keep their program order) to get the peak and the samples.
"""
from __future__ import annotations

from operator import itemgetter

CATEGORIES = ("weights", "gradients", "optimizer", "activations", "recompute", "buffers", "cp_buffers", "workspace")


class ChangeIds:
    """Distinct change tuples ((category, delta), ...) numbered from 1 (0: no change), so a log
    can be kept as two flat lists (times, ids) and replayed with numpy (`MemoryTracker.flat`)."""

    def __init__(self):
        self.changes: list = [()]
        self._ids: dict = {}
        self._arrays = None
        self.single = True      # every change so far has one (category, delta)

    def id_of(self, changes: tuple) -> int:
        if not changes:
            return 0
        i = self._ids.get(changes)
        if i is None:
            i = self._ids[changes] = len(self.changes)
            self.changes.append(changes)
            self._arrays = None
            self.single = self.single and len(changes) == 1
        return i

    def buffer_free(self, nbytes: float) -> int:
        """The id of releasing `nbytes` of receive buffers."""
        return self.id_of((("buffers", -nbytes),))

    def arrays(self):
        """(entries per id, offset of each id's first delta, deltas, category index) as arrays."""
        if self._arrays is None:
            import numpy as np
            lens = [len(ch) for ch in self.changes]
            self._arrays = (np.array(lens, dtype=np.intp), np.cumsum([0] + lens[:-1]).astype(np.intp),
                            np.array([d for ch in self.changes for _, d in ch], dtype=float),
                            np.array([CATEGORIES.index(c) for ch in self.changes for c, _ in ch], dtype=np.intp))
        return self._arrays


class MemoryTracker:
    __slots__ = ("static", "log", "peak", "peak_by", "samples", "flat")

    def __init__(self, static: dict):
        self.static = dict.fromkeys(CATEGORIES, 0.0)
        self.static.update(static)
        self.log: list = []
        self.peak = 0.0
        self.peak_by: dict = {}
        self.samples: list = []
        self.flat = None      # (times, ids, ChangeIds): the log as flat lists (sim/dag.py)

    def add(self, cat: str, delta: float, when: float) -> None:
        if delta:
            self.log.append((when, ((cat, delta),)))

    def finish(self, record: bool) -> None:
        if self.flat is not None:
            if record:
                raise ValueError("a flat memory log has no samples")
            return self._peak_flat(*self.flat)
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

    def same_flat_log(self, other: "MemoryTracker") -> bool:
        """Whether `other` replays to the same peak: equal static bytes and equal flat logs
        (the replay is deterministic, so equal inputs give bit-equal outputs)."""
        return self.flat is not None and other.flat is not None and self.static == other.static and \
            self.flat[0] == other.flat[0] and self.flat[1] == other.flat[1]

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

    def _peak_flat(self, times: list, ids: list, reg: ChangeIds) -> None:
        """`_peak_only` of a log kept as flat (time, change id) lists, all in numpy: the same
        stable time order, the same left-to-right running sums (cumsum is sequential), so the
        peak and its breakdown are bit-identical."""
        import numpy as np
        cur = dict(self.static)
        base = sum(cur.values())
        self.peak, self.peak_by = base, dict(cur)
        if not times:
            return
        lens_of, off_of, all_d, all_c = reg.arrays()
        n = len(times)               # fromiter: a third faster than np.array on a list
        order = np.argsort(np.fromiter(times, np.float64, n), kind="stable")
        idx = np.fromiter(ids, np.intp, n)[order]
        if reg.single:                               # one delta per change: entry i is delta i
            flat = off_of[idx]
            ends = np.arange(1, len(idx) + 1)
        else:
            lens = lens_of[idx]
            ends = np.cumsum(lens)                   # entry i ends after delta ends[i]-1
            # the deltas of the sorted entries, in order: each entry's run of its id's deltas
            flat = np.repeat(off_of[idx] - (ends - lens), lens) + np.arange(ends[-1])
        deltas = all_d[flat]
        totals = np.cumsum(np.concatenate(([base], deltas)))[ends]
        i = int(np.argmax(totals))
        if totals[i] > base:
            self.peak = float(totals[i])
            upto = int(ends[i])
            # per category, its deltas up to the peak summed left to right after its static
            # bytes: one row per category, the other categories' deltas 0.0 (adding 0.0 leaves a
            # float as it is), summed by one sequential cumsum along the rows
            cats = all_c[flat[:upto]]
            rows = np.zeros((len(CATEGORIES), upto + 1))
            rows[:, 0] = [cur[name] for name in CATEGORIES]
            rows[cats, np.arange(1, upto + 1)] = deltas[:upto]
            sums = np.cumsum(rows, axis=1)[:, -1]
            for k in np.flatnonzero(np.bincount(cats, minlength=len(CATEGORIES))):   # (np.unique loads numpy.ma)
                cur[CATEGORIES[k]] = float(sums[k])
            self.peak_by = cur
