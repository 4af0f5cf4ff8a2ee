"""A Plan: per pipeline rank, the ordered list of actions. Carries no durations."""
from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

from pipesim.errors import PlanError
from pipesim.schedules.actions import COMM_KINDS, Action

_COMM = frozenset(COMM_KINDS)
_KIND = itemgetter(1)    # Action.kind


@dataclass(frozen=True)
class Plan:
    name: str
    """Schedule name (a registry key, or the CSV file it was read from)."""
    num_ranks: int
    """Pipeline ranks P."""
    num_stages: int
    """Model stages = P * virtual stages per rank."""
    num_microbatches: int
    """Micro-batches M per step."""
    stage_to_rank: tuple[int, ...]
    """stage_to_rank[s] is the rank holding model stage s."""
    ranks: tuple[tuple[Action, ...], ...]
    """ranks[r] is rank r's actions in execution order."""

    def rank_of(self, stage: int) -> int:
        if not 0 <= stage < len(self.stage_to_rank):
            raise PlanError(f"plan {self.name!r}: stage {stage} is outside 0..{len(self.stage_to_rank) - 1}")
        return self.stage_to_rank[stage]

    def stages_of(self, rank: int) -> tuple[int, ...]:
        return tuple(s for s, r in enumerate(self.stage_to_rank) if r == rank)

    @property
    def virtual(self) -> int:
        return self.num_stages // self.num_ranks if self.num_ranks else 0

    @property
    def is_lowered(self) -> bool:
        return any(not _COMM.isdisjoint(map(_KIND, row)) for row in self.ranks)   # C-level scans

    def compute_only(self) -> "Plan":
        """The same plan with SEND/RECV removed."""
        rows = tuple(tuple(a for a in row if a.is_compute) for row in self.ranks)
        return Plan(self.name, self.num_ranks, self.num_stages, self.num_microbatches, self.stage_to_rank, rows)


def loop_stage_map(ranks: int, virtual: int) -> tuple[int, ...]:
    """Loop placement (Megatron interleaving, Narayanan et al. SC'21 Sec. 2.2): stage s on rank s % P."""
    return tuple(s % ranks for s in range(ranks * virtual))


def v_stage_map(ranks: int) -> tuple[int, ...]:
    """V placement (Qi et al. 2024 "Pipeline Parallelism with Controllable Memory", Fig. 2):
    rank r holds stages r and 2P-1-r, so the first and last stage share rank 0."""
    return tuple(s if s < ranks else 2 * ranks - 1 - s for s in range(2 * ranks))
