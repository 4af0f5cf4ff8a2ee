"""One trace schema for the simulator and the emulator, so a cross-check is a diff of two lists.

Times are seconds from the start of the measured step (the emulator aligns ranks at a barrier).
`rank` is the simulated/emulated rank id (representative mode: the pipeline rank; full mode and
the emulator: the global rank); `stage` is the model stage (virtual stage) or -1.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# kinds: plan actions "F","B","I","W","R","SEND_F","RECV_F","SEND_B","RECV_B"; plus
# "TP" (tensor/sequence-parallel collective), "DP" (data-parallel gradient reduction),
# "ZERO_GATHER" (ZeRO-3 parameter all-gather), "OPTIMIZER", "QUANTIZE", "DEQUANTIZE",
# "P2P_GATHER" (a received tensor's TP all-gather under scatter/gather).
STREAMS = ("compute", "comm", "send", "recv", "dp")


@dataclass(frozen=True)
class TraceEvent:
    rank: int
    stream: str
    kind: str
    stage: int
    microbatch: int
    start: float
    end: float
    bytes: float = 0.0
    step: int = 0
    args: dict = field(default_factory=dict, compare=False)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TraceEvent":
        return cls(**d)


@dataclass(frozen=True)
class MemorySample:
    """Bytes allocated on `rank` from `time` on, by category (weights, gradients, optimizer,
    activations, buffers)."""
    rank: int
    time: float
    total: float
    by_category: dict = field(default_factory=dict, compare=False)
    step: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MemorySample":
        return cls(**d)
