"""report.html: one self-contained page (plotly.js embedded, no network at view time) with the
metrics, an interactive timeline (rank x stream; zoom, hover: op, micro-batch, duration, bytes),
memory over time per rank with the GPU capacity, the per-stage breakdown and the "why" section.

Why plotly: interactive zoom/pan/hover on tens of thousands of bars with no hand-written
JavaScript, and `plotly.offline.get_plotlyjs()` ships the library inside the page, so the file
opens offline and can be mailed around. It is imported only when a page is written.
"""
from __future__ import annotations

import html
import json

from pipesim.report.metrics import TIGHT_TEXT
from pipesim.report.plots import COLORS

MAX_BARS = 30_000          # timeline bars drawn (the trace.json keeps every event)
STREAM_ORDER = ("compute", "send", "recv", "dp", "comm")
MS = 1e3
GiB = 2**30


def _rows(events):
    """Row labels top to bottom: rank r's streams in STREAM_ORDER."""
    keys = sorted({(e.rank, e.stream) for e in events},
                  key=lambda k: (k[0], STREAM_ORDER.index(k[1]) if k[1] in STREAM_ORDER else 99, k[1]))
    return [f"rank {r} · {st}" for r, st in keys]


def timeline_figure(events, path=(), title: str = ""):
    import plotly.graph_objects as go
    evs = sorted(events, key=lambda e: e.start)
    shown = evs[:MAX_BARS]
    rows = _rows(shown)
    by_kind: dict = {}
    for e in shown:
        by_kind.setdefault(e.kind, []).append(e)
    fig = go.Figure()
    for kind, es in sorted(by_kind.items()):
        fig.add_trace(go.Bar(
            name=kind, orientation="h", base=[e.start * MS for e in es], x=[max(e.duration, 0.0) * MS for e in es],
            y=[f"rank {e.rank} · {e.stream}" for e in es], marker_color=COLORS.get(kind, "#9e9e9e"),
            marker_line_width=0,
            customdata=[[e.kind, e.stage, e.microbatch, e.duration * MS, e.bytes / 2**20] for e in es],
            hovertemplate=("%{customdata[0]} stage %{customdata[1]} micro-batch %{customdata[2]}<br>"
                           "start %{base:.3f} ms, duration %{customdata[3]:.3f} ms<br>"
                           "%{customdata[4]:.2f} MiB<extra>%{y}</extra>")))
    ops = [seg for seg in path if seg["what"] == "op"]
    if ops:
        fig.add_trace(go.Bar(
            name="critical path", orientation="h", base=[s["start"] * MS for s in ops],
            x=[(s["end"] - s["start"]) * MS for s in ops], y=[f"rank {s['rank']} · compute" for s in ops],
            marker=dict(color="rgba(0,0,0,0)", line=dict(color="black", width=2)),
            hovertemplate="critical path: %{base:.3f} ms + %{x:.3f} ms<extra>%{y}</extra>"))
    note = f" (first {MAX_BARS:,} of {len(evs):,} events)" if len(evs) > MAX_BARS else ""
    fig.update_layout(barmode="overlay", title=title + note, xaxis_title="time (ms)", height=160 + 26 * len(rows),
                      yaxis=dict(categoryorder="array", categoryarray=rows[::-1]), legend_title="op",
                      margin=dict(l=10, r=10, t=50, b=40), bargap=0.25)
    return fig


def memory_figure(samples, capacity: float, title: str = ""):
    import plotly.graph_objects as go
    by_rank: dict = {}
    for m in sorted(samples, key=lambda m: (m.rank, m.time)):
        by_rank.setdefault(m.rank, []).append(m)
    fig = go.Figure()
    for rank, ms in sorted(by_rank.items())[:64]:
        fig.add_trace(go.Scatter(
            name=f"rank {rank}", x=[m.time * MS for m in ms], y=[m.total / GiB for m in ms], mode="lines",
            line_shape="hv", customdata=[[", ".join(f"{k} {v / GiB:.2f}" for k, v in m.by_category.items() if v)]
                                         for m in ms],
            hovertemplate="%{x:.3f} ms: %{y:.3f} GiB<br>%{customdata[0]} GiB<extra>%{fullData.name}</extra>"))
    fig.add_hline(y=capacity / GiB, line_dash="dash", line_color="red",
                  annotation_text=f"GPU memory {capacity / GiB:.1f} GiB", annotation_position="top left")
    fig.update_layout(title=title, xaxis_title="time (ms)", yaxis_title="allocated (GiB)", height=420,
                      margin=dict(l=10, r=10, t=50, b=40))
    return fig


def stages_figure(stages: list[dict]):
    """F+B per micro-batch of every model stage, split into layers / embedding / LM head."""
    import plotly.graph_objects as go
    x = [f"stage {st['stage']}" for st in stages]
    fig = go.Figure()
    for key, label, color in (("layers_s", "layers", "#4C78A8"), ("embedding_s", "embedding", "#72B7B2"),
                              ("head_s", "LM head", "#E45756")):
        ys = [st[key] * MS for st in stages]
        if any(ys):
            fig.add_trace(go.Bar(name=label, x=x, y=ys, marker_color=color,
                                 hovertemplate=f"{label}: %{{y:.2f}} ms<extra>%{{x}}</extra>"))
    rest = [max(0.0, (st["seconds"] - st["layers_s"] - st["embedding_s"] - st["head_s"]) * MS) for st in stages]
    if any(r > 1e-6 for r in rest):
        fig.add_trace(go.Bar(name="other (recompute, TP, overheads)", x=x, y=rest, marker_color="#BAB0AC"))
    fig.update_layout(barmode="stack", title="F+B per micro-batch by stage", yaxis_title="ms", height=360,
                      margin=dict(l=10, r=10, t=50, b=40))
    return fig


def ranks_figure(ranks: list[dict], span: float):
    """Per rank: compute busy, communication busy and bubble (idle) time in the step."""
    import plotly.graph_objects as go
    shown = ranks[:64]
    x = [f"rank {r['rank']}" for r in shown]
    fig = go.Figure()
    fig.add_trace(go.Bar(name="compute", x=x, y=[r["compute_busy_s"] * MS for r in shown], marker_color="#4C78A8"))
    fig.add_trace(go.Bar(name="communication (busy)", x=x, y=[r["comm_busy_s"] * MS for r in shown],
                         marker_color="#FF9DA6"))
    fig.add_trace(go.Bar(name="bubble (idle)", x=x, y=[r["bubble_fraction"] * span * MS for r in shown],
                         marker_color="#BAB0AC"))
    fig.update_layout(barmode="group", title="time per rank in the step", yaxis_title="ms", height=360,
                      margin=dict(l=10, r=10, t=50, b=40))
    return fig


def _table(headers, rows) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _metrics(d: dict, s) -> str:
    exposed = ", ".join(f"{k} {v * MS:.2f} ms" for k, v in d["exposed_comm_s"].items()) or "-"
    rows = [("step time", f"{d['step_time_s'] * MS:.3f} ms"),
            ("throughput", f"{d['throughput_samples_per_s']:.2f} samples/s, {d['tokens_per_s']:,.0f} tokens/s"),
            ("model TFLOP/s per GPU", f"{d['model_tflops_per_gpu']:.2f} (MFU {d['mfu'] * 100:.1f} %)"),
            ("pipeline bubble", f"{d['bubble_fraction'] * 100:.2f} %"),
            ("peak memory", f"{d['peak_memory_bytes'] / GiB:.2f} of {d['memory_capacity_bytes'] / GiB:.2f} GiB"
             + (" — OUT OF MEMORY" if d["oom"] else "")
             + (f" — {TIGHT_TEXT}" if d.get("memory_tight") else "")),
            ("exposed communication (max rank)", exposed),
            ("GPUs", f"{d['num_gpus']} (tensor {s.parallel.tensor}, pipeline {s.parallel.pipeline}, "
                     f"data {s.parallel.data}, virtual {s.parallel.virtual_stages})"),
            ("schedule", f"{d.get('plan', d['schedule'])}, {d['num_microbatches']} micro-batches of "
                         f"{s.training.micro_batch_size}, {d.get('mode', '')} mode")]
    lost = max((r.get("compute_contention_s", 0.0) for r in d.get("ranks", [])), default=0.0)
    if lost > 0:       # compute slowed beside overlapped DP collectives (sim/interference.py)
        from pipesim.costs.norm_kernels import norm_wait
        w = norm_wait(s)
        waits = f", the norm kernels waiting for them (norm_sm_margin {w['margin']} < {w['dp']} SMs)" if w and w["dp"] else ""
        rows.append(("SM contention (max rank)", f"{lost * MS:.2f} ms of compute lost beside overlapped "
                                                 f"data-parallel collectives{waits}"))
    from pipesim.costs.documents import documents_text
    if packed := documents_text(s):
        rows.append(("packed documents", packed))
    from pipesim.costs.lora import lora_clause
    if lora := lora_clause(s):
        rows.append(("fine-tuning", lora[2:]))
    if "tensor_core_rate" in d:
        from pipesim.costs.roofline import rate_text
        rows.append(("kernel rates", rate_text(d["tensor_core_rate"])))
        if "attention_table" in d["tensor_core_rate"]:
            rows.append(("attention table", d["tensor_core_rate"]["attention_table"]))
    if "accuracy" in d:
        from pipesim.report.accuracy import accuracy_text
        rows.append(("accuracy on published runs", accuracy_text(d["accuracy"])))
    if "run" in d:
        from pipesim.report.goodput import run_rows
        rows += run_rows(d["run"])
    if d.get("cost_sources"):
        total = sum(d["cost_sources"].values()) or 1.0
        rows.append(("op costs from", ", ".join(f"{k} {v / total * 100:.0f} %" for k, v in
                                                 sorted(d["cost_sources"].items(), key=lambda kv: -kv[1]))))
    return _table(["metric", "value"], rows)


def _why_html(why: dict, report, headline: list[str]) -> str:
    if not why:
        return "<p>(not computed: --no-why)</p>"
    parts = ["<pre class='why'>" + html.escape("\n".join(headline)) + "</pre>"]
    b = why.get("bubble")
    if b:
        rows = [("fill / drain (the schedule with equal stages, free communication)", f"{b['fill_drain'] * 100:.2f}"),
                ("stage imbalance", f"{b['imbalance'] * 100:.2f}")]
        rows += [(f"exposed communication: {k}", f"{v * 100:.2f}") for k, v in b["communication_by_kind"].items()]
        if not b["communication_by_kind"]:
            rows.append(("exposed communication", f"{b['communication'] * 100:.2f}"))
        rows.append(("total (simulated bubble)", f"{b['bubble'] * 100:.2f}"))
        parts.append("<h3>Bubble by cause (percentage points)</h3>" + _table(["cause", "points"], rows))
    ps = why["path"]
    if ps["seconds_by_rank"]:
        rows = [(f"rank {r}", f"{v * MS:.2f}", f"{v / ps['length_s'] * 100:.1f}") for r, v in
                sorted(ps["seconds_by_rank"].items())]
        rows.append(("transfers (P2P on the path)", f"{ps['transfer_s'] * MS:.2f}",
                     f"{ps['transfer_s'] / ps['length_s'] * 100:.1f}"))
        rows.append(("idle on the path", f"{ps['idle_s'] * MS:.2f}", f"{ps['idle_s'] / ps['length_s'] * 100:.1f}"))
        parts.append("<h3>Critical path: who sets the step time</h3>"
                     + _table(["on the path", "ms", "% of the path"], rows))
    st = why["stages"]
    if st:
        rows = [(x["stage"], x["layers"], "yes" if x["embedding"] else "", "yes" if x["head"] else "",
                 f"{x['forward_s'] * MS:.2f}", f"{x['backward_s'] * MS:.2f}", f"{x['recompute_s'] * MS:.2f}",
                 f"{x['head_s'] * MS:.2f}" if x["head"] else "") for x in st]
        parts.append("<h3>Stages (per micro-batch)</h3>" + _table(
            ["stage", "layers", "embedding", "LM head", "F ms", "B ms", "recompute ms", "LM head ms"], rows))
    if why["suggestions"]:
        rows = [(x["title"], f"{x['step_time_s'] * MS:.1f}", f"{x['speedup']:.2f}x",
                 f"{x['bubble_fraction'] * 100:.1f} %", f"{x['peak_memory_bytes'] / GiB:.2f}", x["how"])
                for x in why["suggestions"]]
        parts.append("<h3>Suggestions (each one simulated)</h3>" + _table(
            ["change", "step ms", "speed-up", "bubble", "peak GiB", "how"], rows))
    path = why["critical_path"]
    if path:
        rows = [(x["rank"], x["what"], x["kind"], x["stage"], x["microbatch"], f"{x['start'] * MS:.3f}",
                 f"{(x['end'] - x['start']) * MS:.3f}") for x in path[:400]]
        more = f" (first 400 of {len(path)})" if len(path) > 400 else ""
        parts.append(f"<details><summary>Critical path, segment by segment{more}</summary>"
                     + _table(["rank", "what", "op", "stage", "micro-batch", "start ms", "ms"], rows) + "</details>")
    return "\n".join(parts)


CSS = """body{font-family:system-ui,sans-serif;margin:24px;max-width:1400px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4}pre.why{font-size:13px;white-space:pre-wrap;background:#f8f8f8;padding:8px;border:1px solid #eee}
.note{color:#666;font-size:12px}"""


def render(report, scenario, why: dict | None, headline: list[str], title: str) -> str:
    """The page as a string (plotly.js inline)."""
    import plotly.offline
    d = report.data
    figs = [("timeline", timeline_figure(report.events, (why or {}).get("critical_path", ()),
                                         "timeline (drag to zoom, double-click to reset)")),
            ("memory", memory_figure(report.memory, d["memory_capacity_bytes"], "memory per rank")),
            ("ranks", ranks_figure(d["ranks"], d.get("pipeline_span_s", d["step_time_s"])))]
    if why and why.get("stages"):
        figs.append(("stages", stages_figure(why["stages"])))
    divs = {name: fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{name}",
                              config={"displaylogo": False}) for name, fig in figs}
    data_json = json.dumps({"step_time_s": d["step_time_s"], "bubble_fraction": d["bubble_fraction"]})
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{CSS}</style>
<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p class="note">pipesim report of {html.escape(str(scenario.source))}: {html.escape(scenario.model.name)} on
{scenario.num_gpus} × {html.escape(scenario.system.gpu.name)}. Self-contained page: the charts work offline.</p>
<h2>Metrics</h2>{_metrics(d, scenario)}
<h2>Why</h2>{_why_html(why, report, headline)}
<h2>Timeline</h2>{divs['timeline']}
<h2>Memory</h2>{divs['memory']}
<h2>Per stage and per rank</h2>{divs.get('stages', '')}{divs['ranks']}
<script type="application/json" id="pipesim-metrics">{data_json}</script>
</body></html>
"""
