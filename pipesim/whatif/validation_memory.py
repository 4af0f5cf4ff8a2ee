"""Peak memory per GPU against the published runs that state it (`measured.peak_memory_gib` in a
validation case, any family): pipesim's peak over the simulated ranks, the most loaded GPU, as the
sources take the maximum over their GPUs.

What a source measured is named by `measured.memory` and printed with the table, because pipesim
predicts the bytes the training step holds, not an allocator's bookkeeping:
  reserved   PyTorch's caching allocator's peak reserved bytes (torch.cuda.memory_stats
             "reserved_bytes.all.peak"): the live tensors plus the freed blocks the allocator keeps
             cached; the CUDA context and NCCL's own buffers are outside it.
  allocated  the peak of live tensor bytes ("allocated_bytes.all.peak").
A reserved figure sits above the live bytes by what the allocator keeps cached (9-18 % in
Megatron-Bridge's published measurements, pipesim/report/metrics.py ALLOCATOR_RESERVE), which
pipesim does not add to its prediction; the signed error shows it.
"""
from __future__ import annotations

import math

GIB = 2 ** 30
MEMORY_KINDS = {"reserved": "PyTorch's peak reserved bytes (live tensors + the caching allocator's cached blocks)",
                "allocated": "PyTorch's peak allocated bytes (live tensors)"}


def read_memory(measured: dict, where: str) -> tuple[float | None, str | None]:
    """(GiB, kind) of a case's published peak memory, (None, None) when it states none, or a
    one-line error naming the case and the key."""
    from pipesim.errors import ScenarioError
    from pipesim.whatif.validation import positive_number
    value = measured.get("peak_memory_gib")
    if value is None:
        return None, None
    if not positive_number(value):
        raise ScenarioError(f"{where}: measured.peak_memory_gib: expected a positive number of GiB, got {value!r}")
    kind = measured.get("memory")
    if kind not in MEMORY_KINDS:
        raise ScenarioError(f"{where}: measured.memory: expected one of {', '.join(MEMORY_KINDS)} (what the "
                            f"peak_memory_gib figure counts), got {kind!r}")
    return float(value), kind


def predicted_gib(report: dict) -> float:
    """pipesim's peak memory of the most loaded simulated GPU, in GiB."""
    return report["peak_memory_bytes"] / GIB


def _errors(results) -> list[float]:
    return [r.memory_error_pct for r in results if r.memory_error_pct is not None]


def memory_stats(results) -> tuple[float, float, float, int]:
    """(MAPE, max |error|, mean signed error, cases) of the peak-memory predictions, in %."""
    errs = _errors(results)
    if not errs:
        return math.nan, math.nan, math.nan, 0
    return (sum(abs(e) for e in errs) / len(errs), max(abs(e) for e in errs), sum(errs) / len(errs), len(errs))


def format_memory(results) -> list[str]:
    """The peak-memory table of a family's cases that publish one (empty if none does)."""
    rows = [r for r in results if r.case.memory_gib is not None]
    if not rows:
        return []
    kinds = sorted({r.case.memory_kind for r in rows})
    lines = [f"  peak memory per GPU, GiB (published: {'; '.join(MEMORY_KINDS[k] for k in kinds)}; "
             f"pipesim: the bytes the step holds, its most loaded GPU)",
             f"  {'case':44s} {'pred':>7s} {'pub':>7s} {'err %':>7s}"]
    for r in rows:
        pred = "-" if r.memory_pred_gib is None else f"{r.memory_pred_gib:.1f}"
        err = "-" if r.memory_error_pct is None else f"{r.memory_error_pct:+.1f}"
        lines.append(f"  {r.case.id:44s} {pred:>7s} {r.case.memory_gib:>7.1f} {err:>7s}")
    m, mx, bias, n = memory_stats(rows)
    lines.append(f"  memory: MAPE {m:.1f} %, max {mx:.1f} %, mean signed {bias:+.1f} % ({n} of {len(rows)} cases; "
                 f"- = pipesim holds less than measured)")
    return lines


def memory_summary_line(suite: str, results, label: str) -> str | None:
    """The summary table's line for a family's peak memory (`label`: its standing, e.g. held
    out), None when it publishes none."""
    m, mx, bias, n = memory_stats(results)
    if not n:
        return None
    total = sum(1 for r in results if r.case.memory_gib is not None)
    return f"  {suite + ' memory':16s} {n:>3d}/{total:<3d} {m:7.1f} {mx:7.1f} {bias:+7.1f}  {label}"
