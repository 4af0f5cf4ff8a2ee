"""Per-rank recording: TraceEvents and MemorySamples (the simulator's schema), appended line by
line to a JSONL file so a run that is killed keeps what it did, plus a small memory-mapped status
record (step, action, phase, start time) the launcher reads to name where a rank stopped.
"""
from __future__ import annotations

import json
import mmap
import os
import time

from pipesim.trace import MemorySample, TraceEvent

STATUS_BYTES = 256
ACTIVE: dict = {}     # this process's Recorder under "recorder", for the stop/failure paths


class Status:
    """Fixed-size status record in a file shared with the launcher (no syscall per update)."""

    def __init__(self, path: str | None):
        self._mm = None
        if path:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, STATUS_BYTES)
            self._mm = mmap.mmap(fd, STATUS_BYTES)
            os.close(fd)
        self.seq = 0
        self.pid = os.getpid()

    def set(self, step: int, action: str, phase: str) -> None:
        if self._mm is None:
            return
        self.seq += 1
        # hand-formatted JSON (json.dumps costs more than the rest of the update)
        line = (f'{{"seq": {self.seq}, "step": {step}, "action": "{action}", "phase": "{phase}", '
                f'"t": {time.monotonic()!r}, "pid": {self.pid}}}').encode()[: STATUS_BYTES - 1]
        self._mm[:STATUS_BYTES] = line.ljust(STATUS_BYTES, b" ")

    @staticmethod
    def read(path: str) -> dict | None:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(STATUS_BYTES).strip(b" \x00")
            return json.loads(raw) if raw else None
        except (OSError, ValueError):
            return None


class Recorder:
    """Collects events of the measured steps on the common clock (results.merge moves them to the
    step origin). On CUDA, timestamps are CUDA events recorded on the current stream, turned into
    seconds at the end of the step against a reference event recorded at the step's barrier."""

    def __init__(self, rank: int, path: str | None = None, status: Status | None = None, cuda: bool = False):
        self.rank = rank
        self.cuda = cuda
        self._pending: list = []
        self._ref = None
        self._t_ref = 0.0
        self.events: list[TraceEvent] = []
        self.memory: list[MemorySample] = []
        self.step = 0
        self.offset = 0.0          # this rank's clock minus the reference clock
        self.keep = True           # False during warm-up steps
        self.metas: list[dict] = []
        self.base_args: dict = {}  # added to every event (the pipeline rank "pp")
        # Records are kept as dicts and written at the end of each step (flush_file), on an
        # exception, and on SIGTERM from the launcher (worker installs the handler), so the
        # measured step is not perturbed by a write per action and a stopped run keeps its trace.
        self._fh = open(path, "w") if path else None
        self._lines: list[tuple] = []
        self.status = status or Status(None)

    def start_step(self) -> float:
        """Call right after the step's barrier; returns the host time of the step start."""
        if self.cuda:
            import torch
            torch.cuda.synchronize()
            self._ref = torch.cuda.Event(enable_timing=True)
            self._ref.record()
        self._t_ref = time.perf_counter()
        return self._t_ref

    def now(self):
        """A timestamp: perf_counter seconds on CPU, a recorded CUDA event on GPU."""
        if self.cuda:
            import torch
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def rel(self, t) -> float:
        """Seconds on the common clock (rank 0's); results.merge subtracts each step's origin."""
        if not isinstance(t, float):      # a CUDA event (its stream has been synchronised)
            t = self._t_ref + self._ref.elapsed_time(t) / 1e3
        return t - self.offset

    def event(self, stream, kind, stage, mb, start, end, nbytes=0.0, **args) -> None:
        if not self.keep:
            return
        if self.cuda:
            self._pending.append(("event", (stream, kind, stage, mb, start, end, nbytes), args))
            return
        self._event(stream, kind, stage, mb, start, end, nbytes, **args)

    def _event(self, stream, kind, stage, mb, start, end, nbytes=0.0, **args) -> None:
        ev = TraceEvent(self.rank, stream, kind, stage, mb, self.rel(start), self.rel(end), float(nbytes),
                        self.step, dict(self.base_args, **args))
        self.events.append(ev)
        self._write(("event", ev))

    def sample(self, t, total: float, by_category: dict) -> None:
        if not self.keep:
            return
        if self.cuda:
            self._pending.append(("memory", (t, total, dict(by_category)), {}))
            return
        self._sample(t, total, by_category)

    def flush(self) -> None:
        """Resolve CUDA timestamps (one synchronisation per step) and write what was pending."""
        if not self._pending:
            return
        import torch
        torch.cuda.synchronize()
        for what, a, kw in self._pending:
            if what == "event":
                self._event(*a, **kw)
            else:
                self._sample(*a)
        self._pending = []

    def _sample(self, t, total: float, by_category: dict) -> None:
        ms = MemorySample(self.rank, self.rel(t), float(total), dict(by_category), self.step)
        self.memory.append(ms)
        self._write(("memory", ms))

    def write_meta(self, **meta) -> None:
        meta = {"rank": self.rank, **meta}
        self.metas.append(meta)
        self._write(("meta", meta))

    def _write(self, obj: tuple) -> None:
        """Queue (type, record); records become JSON lines only in flush_file (between steps)."""
        if self._fh is not None:
            self._lines.append(obj)

    def flush_file(self) -> None:
        if self._fh is None:
            return
        lines, self._lines = self._lines, []
        out = []
        for kind, rec in lines:
            d = rec if kind == "meta" else rec.to_dict()
            out.append(json.dumps({"type": kind, **d}) + "\n")
        self._fh.write("".join(out))
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self.flush_file()
            self._fh.close()
            self._fh = None


def read_jsonl(path: str) -> tuple[list[TraceEvent], list[MemorySample], list[dict]]:
    events, memory, meta = [], [], []
    try:
        with open(path) as fh:
            lines = fh.readlines()
    except OSError:
        return events, memory, meta
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue          # a line cut short by a kill
        kind = obj.pop("type", None)
        if kind == "event":
            events.append(TraceEvent.from_dict(obj))
        elif kind == "memory":
            memory.append(MemorySample.from_dict(obj))
        elif kind == "meta":
            meta.append(obj)
    return events, memory, meta
