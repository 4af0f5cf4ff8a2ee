"""Rows -> CSV, ranking and a terminal table; the Pareto front of memory vs throughput."""
from __future__ import annotations

import csv
import math
from typing import Iterable, Sequence

GiB = 2**30
RANK_KEY = "throughput_samples_per_s"

# Columns shown first (when present), then the swept keys; the CSV carries everything.
LEAD = ["status", "tensor", "context", "pipeline", "data", "virtual_stages", "micro_batch_size", "num_microbatches",
        "schedule", "recompute", "zero_stage", "compression_bits"]
# Swept scenario keys already shown as a layout column.
ALIASES = {"parallel.tensor", "parallel.context", "parallel.pipeline", "parallel.data", "parallel.virtual_stages",
           "training.micro_batch_size", "training.schedule", "training.recompute", "training.zero_stage",
           "training.activation_compression_bits"}
METRICS = ["step_time_s", "throughput_samples_per_s", "tokens_per_s", "model_tflops_per_gpu", "mfu",
           "bubble_fraction", "peak_memory_bytes", "oom", "num_gpus"]


def columns(rows: Sequence[dict], swept: Sequence[str] = ()) -> list[str]:
    seen = {}
    for name in ["index", *swept, *LEAD, *METRICS]:
        if any(name in r for r in rows):
            seen[name] = None
    for r in rows:
        for k in r:
            if k != "reason":
                seen.setdefault(k, None)
    return [*seen, "reason"]


def write_csv(path, rows: Sequence[dict], swept: Sequence[str] = ()) -> None:
    cols = columns(rows, swept)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(r.get(k)) for k in cols})


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        text = f"{v:.10g}"
        return text if any(c in text for c in ".einf") else text + ".0"   # stays a float on reading
    return v


def read_csv(path) -> list[dict]:
    """Read a sweep CSV back (numbers parsed) for plotting and docs."""
    out = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            out.append({k: _parse(v) for k, v in r.items()})
    return out


def _parse(v: str):
    if v == "":
        return None
    if v in ("True", "False"):
        return v == "True"
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def feasible(rows: Iterable[dict]) -> list[dict]:
    return [r for r in rows if r.get("status") == "ok" and _num(r.get(RANK_KEY)) is not None]


def rank(rows: Iterable[dict], key: str = RANK_KEY, descending: bool = True) -> list[dict]:
    """Feasible rows, best first; ties broken by lower peak memory."""
    ok = [r for r in rows if r.get("status") == "ok" and _num(r.get(key)) is not None]
    sign = -1 if descending else 1
    return sorted(ok, key=lambda r: (sign * r[key], _num(r.get("peak_memory_bytes")) or 0.0, r.get("index", 0)))


def pareto_front(rows: Iterable[dict], x: str = "peak_memory_bytes", y: str = RANK_KEY) -> list[dict]:
    """Rows not dominated in (lower x, higher y), sorted by x. A row is dominated when another has
    x <= and y >= with one strict."""
    pts = [r for r in rows if _num(r.get(x)) is not None and _num(r.get(y)) is not None]
    pts.sort(key=lambda r: (r[x], -r[y]))
    front, best_y = [], -math.inf
    for r in pts:
        if r[y] > best_y:
            front.append(r)
            best_y = r[y]
    return front


def _num(v):
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return v
    return None


def format_table(rows: Sequence[dict], swept: Sequence[str] = (), top: int = 10, ordered: bool = False) -> str:
    """Ranked table of the best `top` feasible rows for the terminal (`ordered`: rows are already
    in the order to show)."""
    ranked = list(rows)[:top] if ordered else rank(rows)[:top]
    note = ""
    if not ranked:
        # Nothing fits: show the out-of-memory rows (fastest first) so the user sees how far off.
        ranked = rank([dict(r, status="ok") for r in rows if r.get("status") == "oom"])[:top]
        if not ranked:
            return "no feasible configuration"
        note = "no feasible configuration; out-of-memory rows (peak over the GPU memory):\n"
    keys = [k for k in swept if k not in LEAD and k not in ALIASES]
    headers = ["#", "t", "cp", "p", "d", "v", "mb", "M", "schedule", "recomp", "zero", "bits", *keys,
               "step s", "samples/s", "TFLOP/s/GPU", "MFU", "bubble", "peak GiB"]
    lines = []
    for i, r in enumerate(ranked, 1):
        lines.append([str(i), *(_fmt(r.get(k)) for k in ("tensor", "context", "pipeline", "data", "virtual_stages",
                                                         "micro_batch_size", "num_microbatches", "schedule",
                                                         "recompute", "zero_stage", "compression_bits")),
                      *(_fmt(r.get(k)) for k in keys),
                      _fmt(r.get("step_time_s"), "{:.3f}"), _fmt(r.get(RANK_KEY), "{:.1f}"),
                      _fmt(r.get("model_tflops_per_gpu"), "{:.1f}"), _fmt(r.get("mfu"), "{:.3f}"),
                      _fmt(r.get("bubble_fraction"), "{:.3f}"),
                      _fmt((r.get("peak_memory_bytes") or 0) / GiB, "{:.1f}")])
    widths = [max(len(h), *(len(l[j]) for l in lines)) for j, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths))]
    out += ["  ".join(c.rjust(w) for c, w in zip(l, widths)) for l in lines]
    return note + "\n".join(out)


def _fmt(v, spec: str = "{}") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and spec == "{}":
        return f"{v:g}"
    try:
        return spec.format(v)
    except (ValueError, TypeError):
        return str(v)
