"""Timeline and memory plots (PNG, matplotlib Agg).

`draw_timeline(ax, events)` draws one row per rank (compute on the row, communication as a thin
bar under it), F/B/I/W/R and comm kinds coloured, micro-batch numbers on wide-enough boxes;
`plot_timeline` writes one; `plot_compare` stacks two (simulated above, measured below) on a
shared time axis for `pipesim compare`. `plot_memory` draws bytes over time, one line per rank.
"""
from __future__ import annotations

from pipesim.errors import PipesimError

COLORS = {"F": "#4C78A8", "B": "#F58518", "I": "#E45756", "W": "#72B7B2", "R": "#B279A2",
          "FB": "#9E6A2F",          # fused forward + backward of two micro-batches (MoE A2A overlap)
          "QUANTIZE": "#9D755D", "DEQUANTIZE": "#9D755D", "OPTIMIZER": "#54A24B",
          "SEND_F": "#BAB0AC", "SEND_B": "#8C8C8C", "RECV_F": "#EECA3B", "RECV_B": "#EECA3B",
          "DP": "#FF9DA6", "ZERO_GATHER": "#D67195", "ZERO_ALLGATHER": "#D67195", "TP": "#79706E",
          "P2P_GATHER": "#79706E"}    # a received tensor's TP all-gather (scatter/gather)
COMM_STREAMS = ("send", "dp", "comm")
MAX_RANK_ROWS = 64
MAX_LABELS = 2000         # micro-batch numbers drawn on boxes (beyond, they would be unreadable)


def _mpl():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def draw_timeline(ax, events, title: str = "", ranks=None, t_unit: float = 1e-3) -> None:
    """Draw `events` (TraceEvents) on `ax`; x axis in ms by default (t_unit seconds)."""
    from matplotlib.patches import Patch
    ranks = sorted({e.rank for e in events}) if ranks is None else list(ranks)
    ranks = ranks[:MAX_RANK_ROWS]
    row = {r: i for i, r in enumerate(ranks)}
    span = max((e.end for e in events), default=0.0) or 1.0
    seen = set()
    # one broken_barh per (row, kind, lane): a call per event takes minutes on full-mode traces
    groups: dict = {}
    labels = []
    for e in events:
        if e.rank not in row or e.stream == "recv":
            continue
        y = row[e.rank]
        span_x = (e.start / t_unit, (e.end - e.start) / t_unit)
        if e.stream == "compute":
            groups.setdefault((y, e.kind, "compute"), []).append(span_x)
            if e.microbatch >= 0 and (e.end - e.start) > span / 60:
                labels.append(((e.start + e.end) / 2 / t_unit, y - 0.1, str(e.microbatch)))
        elif e.stream in COMM_STREAMS and e.end > e.start:
            groups.setdefault((y, e.kind, "comm"), []).append(span_x)
    for (y, kind, lane), spans in groups.items():
        seen.add(kind)
        if lane == "compute":
            ax.broken_barh(spans, (y - 0.4, 0.6), facecolors=COLORS.get(kind, "#cccccc"), edgecolor="black",
                           linewidth=0.3)
        else:
            ax.broken_barh(spans, (y + 0.22, 0.16), facecolors=COLORS.get(kind, "#999999"), linewidth=0)
    if len(labels) <= MAX_LABELS:
        for x, y, text in labels:
            ax.text(x, y, text, ha="center", va="center", fontsize=6, color="white")
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {r}" for r in ranks], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, span / t_unit)
    ax.set_xlabel("time (ms)" if t_unit == 1e-3 else f"time (x{t_unit:g} s)")
    if title:
        ax.set_title(title, fontsize=9)
    handles = [Patch(color=COLORS[k], label=k) for k in COLORS if k in seen]
    if handles:
        ax.legend(handles=handles, fontsize=6, ncol=min(len(handles), 8), loc="upper right",
                  bbox_to_anchor=(1.0, 1.18), frameon=False)


def _save(fig, path) -> None:
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as exc:
        raise PipesimError(f"{path}: cannot write plot ({exc.strerror})") from None
    finally:
        _mpl().close(fig)


def plot_timeline(events, path, title: str = "") -> None:
    plt = _mpl()
    n = min(MAX_RANK_ROWS, len({e.rank for e in events}) or 1)
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.45 * n))
    draw_timeline(ax, events, title)
    _save(fig, path)


def plot_compare(simulated, measured, path, title: str = "") -> None:
    """Simulated timeline above, measured below, same time axis."""
    plt = _mpl()
    n = min(MAX_RANK_ROWS, len({e.rank for e in list(simulated) + list(measured)}) or 1)
    fig, (a, b) = plt.subplots(2, 1, figsize=(12, 2.0 + 0.9 * n), sharex=True)
    draw_timeline(a, simulated, (title + " — " if title else "") + "simulated")
    draw_timeline(b, measured, "measured")
    span = max([e.end for e in list(simulated) + list(measured)] or [1.0]) / 1e-3
    a.set_xlim(0, span)
    _save(fig, path)


def plot_memory(samples, path, title: str = "", capacity: float | None = None) -> None:
    """Bytes allocated over time, one step line per rank (GiB); the GPU capacity dashed."""
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(10, 4))
    by_rank: dict = {}
    for m in sorted(samples, key=lambda m: (m.rank, m.time)):
        by_rank.setdefault(m.rank, []).append(m)
    for i, (rank, ms) in enumerate(sorted(by_rank.items())):
        if i >= MAX_RANK_ROWS:
            break
        ax.step([m.time * 1e3 for m in ms], [m.total / 2**30 for m in ms], where="post", label=f"rank {rank}",
                linewidth=1)
    if capacity:
        ax.axhline(capacity / 2**30, color="red", linestyle="--", linewidth=1, label="GPU memory")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("allocated (GiB)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, ncol=4)
    _save(fig, path)
