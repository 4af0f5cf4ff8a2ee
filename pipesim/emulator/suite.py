"""The crosscheck suite: small GPTs drawn from a seed, each calibrated inside its ranks, simulated
and emulated on 2 local processes (`pipesim crosscheck --suite`, benchmarks/crosscheck_suite.py).

The grid is not hand-picked: case i takes its schedule/parallel layout from LAYOUTS in turn (so
every layout appears) and draws every size uniformly from the issue's ranges with
random.Random(seed * 1000 + i): hidden = heads x head_dim in 64-512, heads 2-8, seq 32-256,
layers 2-8 (a multiple of the model stages), micro-batch 1-8, 4-8 micro-batches, vocab
512-4096. One rule keeps the run time bounded, stated here because it shapes the grid: a draw
whose model FLOPs per step exceed MAX_STEP_GFLOP is drawn again (same seed stream).
"""
from __future__ import annotations

import os
import random
import statistics

# (name, parallel and training settings); every case runs on 2 processes.
LAYOUTS = [
    ("gpipe", {"parallel.pipeline": 2, "training.schedule": "gpipe"}),
    ("1f1b", {"parallel.pipeline": 2, "training.schedule": "1f1b"}),
    ("interleaved", {"parallel.pipeline": 2, "parallel.virtual_stages": 2, "training.schedule": "interleaved-1f1b"}),
    ("zb-h1", {"parallel.pipeline": 2, "training.schedule": "zb-h1"}),
    ("zb-v", {"parallel.pipeline": 2, "parallel.virtual_stages": 2, "training.schedule": "zb-v"}),
    ("tp2", {"parallel.pipeline": 1, "parallel.tensor": 2, "training.schedule": "1f1b"}),
    ("dp2", {"parallel.pipeline": 1, "parallel.data": 2, "training.schedule": "1f1b"}),
]
DEFAULT_CASES = 21          # three of each layout
MAX_STEP_GFLOP = 100.0      # about 1-2 s per step on the 2 cores of the build machine
SYSTEM = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "scenarios", "emulator",
                                       "cpu_system.yaml"))
BASE = {"system": {"preset": SYSTEM}, "training": {"precision": "fp32"}}


def draw_case(seed: int, i: int) -> dict:
    """Case i of the suite with this seed: {"name", "layout", "overrides": [a.b=v ...]}."""
    name, layout = LAYOUTS[i % len(LAYOUTS)]
    rng = random.Random(seed * 1000 + i)
    stages = layout.get("parallel.pipeline", 1) * layout.get("parallel.virtual_stages", 1)
    data = layout.get("parallel.data", 1)
    while True:
        heads = rng.randint(2, 8)
        if layout.get("parallel.tensor", 1) > 1 and heads % 2:
            continue              # tensor parallelism splits the heads
        dims = [d for d in (16, 32, 64) if 64 <= heads * d <= 512]
        hidden = heads * rng.choice(dims)
        seq = rng.randint(32, 256)
        layers = rng.choice([n for n in range(2, 9) if n % stages == 0])
        mb = rng.randint(1, 8)
        m = rng.randint(4, 8)
        if name == "interleaved" and m % 2:
            m -= 1                # interleaving needs micro-batches in rounds of the 2 ranks
        vocab = rng.randint(512, 4096) // 2 * 2          # even: vocab-parallel under TP=2
        if flops_per_step(hidden, seq, layers, vocab, mb * m * data) <= MAX_STEP_GFLOP * 1e9:
            break
    over = {"model.num_layers": layers, "model.hidden_size": hidden, "model.num_attention_heads": heads,
            "model.seq_length": seq, "model.vocab_size": vocab, "model.dropout": False,
            "training.micro_batch_size": mb, "training.global_batch_size": mb * m * data}
    over.update(layout)
    label = f"{name} L{layers} h{hidden} a{heads} s{seq} v{vocab} b{mb}x{m}"
    return {"name": label, "layout": name, "overrides": [f"{k}={v}" for k, v in over.items()]}


def flops_per_step(h: int, s: int, layers: int, vocab: int, samples: int) -> float:
    """Model FLOPs of a GPT step without recompute: Narayanan et al. SC'21, Eq. 3 (factor 72)."""
    return 72.0 * samples * s * layers * h * h * (1 + s / (6 * h) + vocab / (12 * layers * h))


def suite_cases(seed: int = 0, cases: int | None = None) -> list[dict]:
    return [draw_case(seed, i) for i in range(cases or DEFAULT_CASES)]


def _mape(xs) -> float | None:
    xs = [abs(x) for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def run_suite(seed: int = 0, cases: int | None = None, steps: int = 12, warmup: int = 2, nice: int = 20,
              pin: bool = True, progress=None) -> dict:
    """Crosscheck every case; returns the per-case rows and the summary (MAPEs, worst case)."""
    from pipesim.commands.crosscheck import crosscheck
    rows = []
    for case in suite_cases(seed, cases):
        load = os.getloadavg()[0]
        try:
            sim, emu, c = crosscheck(BASE, overrides=case["overrides"], steps=steps, warmup=warmup,
                                     nice=nice, pin=pin)
        except Exception as exc:      # noqa: BLE001 - one broken case is reported, the rest run
            rows.append({**case, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
            if progress:
                progress(f"{case['name']:<44} ERROR {rows[-1]['error']}")
            continue
        st, v = c["step"], c["verdict"]
        acts = {a["kind"]: a for a in c["actions"]}
        row = {**case, "load": load, "predicted_s": st["step_time_predicted_s"],
               "measured_s": st.get("step_time_uncontended_s", st["step_time_measured_s"]),
               "measured_wall_s": st["step_time_measured_s"],
               "error_pct": st.get("step_time_uncontended_error_pct", st["step_time_error_pct"]),
               "wall_error_pct": st["step_time_error_pct"], "spread_pct": v["spread_pct"],
               "contention": v["contention"], "verdict": v["status"],
               "actions": {k: {"predicted_s": a["predicted_s"], "measured_s": a["measured_s"],
                               "measured_cpu_s": a.get("measured_cpu_s"), "error_pct": a["error_pct"],
                               "cpu_error_pct": a.get("cpu_error_pct")} for k, a in acts.items()}}
        rows.append(row)
        if progress:
            progress(format_row(row))
    ok = [r for r in rows if "error" not in r]
    kinds = sorted({k for r in ok for k in r["actions"]})
    per_kind = {k: {"mape_pct": _mape(r["actions"][k]["error_pct"] for r in ok if k in r["actions"]),
                    "cpu_mape_pct": _mape(r["actions"][k]["cpu_error_pct"] for r in ok if k in r["actions"])}
                for k in kinds}
    worst = max(ok, key=lambda r: abs(r["error_pct"]), default=None)
    summary = {"seed": seed, "cases": len(rows), "failed_to_run": len(rows) - len(ok),
               "step_mape_pct": _mape(r["error_pct"] for r in ok),
               "step_wall_mape_pct": _mape(r["wall_error_pct"] for r in ok),
               "worst": {"name": worst["name"], "error_pct": worst["error_pct"]} if worst else None,
               "fb_mape_pct": _mape(r["actions"][k]["error_pct"] for r in ok for k in ("F", "B")
                                    if k in r["actions"]),
               "fb_cpu_mape_pct": _mape(r["actions"][k]["cpu_error_pct"] for r in ok for k in ("F", "B")
                                        if k in r["actions"]),
               "per_kind": per_kind,
               "not_judged": sum(r["verdict"] == "not judged" for r in ok)}
    return {"rows": rows, "summary": summary}


def format_row(r: dict) -> str:
    if "error" in r:
        return f"{r['name']:<44} ERROR {r['error']}"
    f, b = r["actions"].get("F", {}), r["actions"].get("B", {})
    fe = f.get("error_pct")
    be = b.get("error_pct")
    return (f"{r['name']:<44} {r['predicted_s'] * 1e3:9.1f} {r['measured_s'] * 1e3:9.1f} {r['error_pct']:+7.1f} "
            f"±{r['spread_pct'] or 0:4.1f}  {fe if fe is not None else float('nan'):+7.1f} "
            f"{be if be is not None else float('nan'):+7.1f}  {r['contention'] or float('nan'):5.2f} "
            f"{r['load']:5.1f}  {r['verdict']}")


HEADER = (f"{'case':<44} {'pred ms':>9} {'meas ms':>9} {'err %':>7} {'spread':>6}  {'F err':>7} {'B err':>7}  "
          f"{'w/cpu':>5} {'load':>5}  verdict")


def format_suite(res: dict) -> str:
    s = res["summary"]
    lines = [HEADER] + [format_row(r) for r in res["rows"]]
    lines.append("")
    lines.append(f"step MAPE {s['step_mape_pct'] or float('nan'):.1f} % over {s['cases'] - s['failed_to_run']} cases "
                 f"(wall clock, contention kept: {s['step_wall_mape_pct'] or float('nan'):.1f} %); worst "
                 f"{s['worst']['name'] if s['worst'] else '-'} "
                 f"{s['worst']['error_pct'] if s['worst'] else float('nan'):+.1f} %; "
                 f"F/B per-action MAPE {s['fb_mape_pct'] or float('nan'):.1f} % (thread CPU time "
                 f"{s['fb_cpu_mape_pct'] or float('nan'):.1f} %); not judged {s['not_judged']}; seed {s['seed']}")
    lines.append("per action kind  MAPE wall %   MAPE CPU %")
    for k, v in s["per_kind"].items():
        m, cm = v["mape_pct"], v["cpu_mape_pct"]
        lines.append(f"  {k:<12} {m if m is not None else float('nan'):10.1f} "
                     f"{cm if cm is not None else float('nan'):10.1f}")
    return "\n".join(lines)
