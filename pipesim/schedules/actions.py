"""One pipeline action (`1F0` = stage 1, forward, micro-batch 0), spelled as torch.distributed.pipelining spells it."""
from __future__ import annotations

import re
from typing import NamedTuple

from pipesim.errors import PlanError

# Compute kinds. F forward, B full backward, I input-grad half of B, W weight-grad half of B
# (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 2), R recompute-forward where a
# schedule places activation recomputation explicitly.
COMPUTE_KINDS = ("F", "B", "I", "W", "R")
# Point-to-point kinds, named as torch names them. SEND_F/SEND_B carry the sender's stage,
# RECV_F/RECV_B the receiver's stage (torch `_add_send_recv` uses the same convention).
COMM_KINDS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")
KINDS = COMPUTE_KINDS + COMM_KINDS

# Longest alternatives first so "SEND_F" is not read as "S"...; micro-batch digits are required.
_TOKEN = re.compile(r"^(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|F|B|I|W|R)(\d+)$")


class Action(NamedTuple):
    """One step of one rank: `stage` is the model (virtual) stage 0..num_stages-1.

    A NamedTuple (immutable, ordered by stage, kind, micro-batch): hashing and comparison run in
    C, which the placer, the validator and lowering do hundreds of thousands of times per plan."""

    stage: int
    kind: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE_KINDS

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS

    @property
    def is_backward(self) -> bool:
        """B or I: the pass that produces the gradient sent to the previous stage."""
        return self.kind in ("B", "I")

    @staticmethod
    def parse(token: str, where: str = "") -> "Action":
        """Inverse of str(): "1F0" -> Action(1, "F", 0); "2SEND_F3" -> Action(2, "SEND_F", 3)."""
        m = _TOKEN.match(token.strip())
        if m is None:
            loc = f"{where}: " if where else ""
            raise PlanError(
                f"{loc}cannot read action {token!r}; expected STAGE KIND MICROBATCH such as 1F0, 0I3, "
                f"2SEND_F3 with KIND one of {', '.join(KINDS)}"
            )
        return Action(int(m.group(1)), m.group(2), int(m.group(3)))
