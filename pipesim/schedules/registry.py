"""Schedule registry: name -> generator; generate() checks P/M/V and builds a Plan."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipesim.errors import PipesimError
from pipesim.schedules.actions import Action
from pipesim.schedules.plan import Plan


@dataclass(frozen=True)
class Layout:
    """What a generator receives: pipeline ranks P, micro-batches M, chunks per rank V, cost hints."""

    ranks: int
    microbatches: int
    virtual: int
    costs: dict
    """Relative costs f, b, i, w used where a generator places work by time (zero-bubble family)."""
    group: int | None = None
    """Interleaved: micro-batches per group and chunk (Megatron-Core microbatch_group_size_per_vp_stage;
    None = P)."""
    legacy_all_warmup: bool = False
    """Interleaved: every forward first when M == P, as Megatron-LM's interleaved schedule did before
    Megatron-Core (2021-23); Megatron-Core and torch.distributed.pipelining warm up as for any M."""


Generator = Callable[[Layout], tuple[tuple[int, ...], list[list[Action]]]]
ALIASES: dict[str, str] = {}


class _Registry(dict):
    """name -> generator. Iterates canonical names only; lookups also accept aliases and any case,
    so `"Interleaved-1F1B" in SCHEDULES` holds wherever generate() would accept the name."""

    def _key(self, name):
        key = name.strip().lower() if isinstance(name, str) else name
        return ALIASES.get(key, key)

    def __contains__(self, name) -> bool:
        return dict.__contains__(self, self._key(name))

    def __getitem__(self, name):
        return dict.__getitem__(self, self._key(name))

    def get(self, name, default=None):
        return dict.get(self, self._key(name), default)


SCHEDULES: dict[str, Generator] = _Registry()
CONSTRAINTS: dict[str, str] = {}

COST_KEYS = ("f", "b", "i", "w")


def register(name: str, *aliases: str, constraint: str = "any P >= 1, M >= 1, V = 1"):
    """Decorator: add a generator under `name` (and aliases); `constraint` is shown in errors and --help."""

    def deco(fn: Generator) -> Generator:
        SCHEDULES[name] = fn
        CONSTRAINTS[name] = constraint
        for a in aliases:
            ALIASES[a] = name
        return fn

    return deco


def canonical(name: str) -> str:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in SCHEDULES:
        valid = ", ".join(sorted(SCHEDULES)) + (f" (aliases: {', '.join(sorted(ALIASES))})" if ALIASES else "")
        raise PipesimError(f"unknown schedule {name!r}; valid names: {valid}")
    return key


def need(cond: bool, name: str, msg: str) -> None:
    """Raise the user-facing error for a P/M/V combination a schedule cannot build."""
    if not cond:
        raise PipesimError(f"schedule {name!r}: {msg} (constraint: {CONSTRAINTS[name]})")


def generate(name: str, stages: int, microbatches: int, virtual: int = 1, **options) -> Plan:
    """Build the plan of schedule `name` for P=`stages` pipeline ranks, M micro-batches, V chunks per rank.

    options: cost hints f, b, i, w (relative, > 0) for time-based placement; recompute=True inserts
    an explicit R (recompute forward) right before every backward; group=N (interleaved only) runs
    micro-batches in groups of N per chunk instead of P; legacy_all_warmup=True (interleaved only) runs
    every forward first when M == P, as Megatron-LM did before Megatron-Core.
    """
    key = canonical(name)
    for label, v in (("stages", stages), ("microbatches", microbatches), ("virtual", virtual)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PipesimError(f"schedule {key!r}: --{label} must be an integer >= 1, got {v!r}")
    recompute = bool(options.pop("recompute", False))
    group = options.pop("group", None)
    legacy = bool(options.pop("legacy_all_warmup", False))
    if group is not None:
        if isinstance(group, bool) or not isinstance(group, int) or group < 1:
            raise PipesimError(f"schedule {key!r}: the micro-batch group must be an integer >= 1, got {group!r}")
        if key != "interleaved":
            raise PipesimError(f"schedule {key!r}: a micro-batch group applies to the interleaved schedule only")
    costs = {"f": 1.0, "b": 2.0, "i": 1.0, "w": 1.0}
    for k in list(options):
        if k not in COST_KEYS:
            raise PipesimError(f"schedule {key!r}: unknown option {k!r}; known: {', '.join(COST_KEYS)}, recompute, "
                               f"group, legacy_all_warmup")
        v = options.pop(k)
        if not isinstance(v, (int, float)) or not v > 0:
            raise PipesimError(f"schedule {key!r}: cost hint {k} must be a number > 0, got {v!r}")
        costs[k] = float(v)
    stage_to_rank, rows = SCHEDULES[key](Layout(stages, microbatches, virtual, costs, group, legacy))
    if recompute:
        rows = [[x for a in row for x in ((Action(a.stage, "R", a.microbatch), a) if a.is_backward else (a,))] for row in rows]
    return Plan(key, stages, len(stage_to_rank), microbatches, tuple(stage_to_rank), tuple(tuple(r) for r in rows))


def legacy_warmup(s) -> bool:
    """Whether the interleaved plan runs every forward first at M == P: Megatron-LM's interleaved
    schedule of 2021-23, the one that exchanged through blocking, batched P2P (training.p2p_sync
    with virtual stages; Megatron-Core's interleaved schedule overlaps its P2P and warms up as for
    any M)."""
    return s.training.p2p_sync and s.parallel.virtual_stages > 1


def schedule_options(group, legacy: bool) -> dict:
    """generate()'s interleaving options, only those set (group=N, legacy_all_warmup)."""
    return {**({"group": group} if group else {}), **({"legacy_all_warmup": True} if legacy else {})}
