"""`pipesim crosscheck` of an MoE scenario: the tiny MoE transformer of pipesim/emulator/moe.py
run for real on CPU ranks (warm-up, then timed steps, op costs and host model calibrated inside
the ranks before and after them, moe_calibration.py), and the simulator on the calibrated profile.
Compared per action (F, B per stage, one dispatch/combine all-to-all) and per step.

More ranks than cores (EP 2 x PP 2 on 2 cores): rank r is pinned to core r mod cores, so the two
stages' ranks share the cores. The host model's static share (cores / ranks, applied to every
rank all the time: `heterogeneity.rank_speed`) over-charges GPipe, whose stages are busy at the
same time only part of the step: a rank waiting in a gloo receive sleeps (its thread CPU time
during a receive is ~0.1 ms of several ms) and leaves its core to the other. The crosscheck
simulates processor sharing instead (core_share_speeds: while n ranks of a core compute, each
runs at 1/n), iterated to a fixed point, and reports full speed and the static share as bounds.
"""
from __future__ import annotations

import json
import os
import statistics


def config_of(s):
    """The emulated model of an MoE scenario; the emulator supports EP folded onto data
    parallelism (tensor 1, data = expert), GPipe, one micro-batch size."""
    from pipesim.emulator.moe import TinyMoE
    from pipesim.errors import ScenarioError
    m, par, tr = s.model, s.parallel, s.training
    problems = [f"{what} ({got})" for what, got, ok in (
        ("tensor must be 1", par.tensor, par.tensor == 1), ("data must equal expert", f"{par.data} vs {par.expert}",
                                                            par.data == par.expert),
        ("schedule must be gpipe", tr.schedule, tr.schedule == "gpipe"),
        ("virtual_stages must be 1", par.virtual_stages, par.virtual_stages == 1),
        ("every layer MoE", m.num_moe_layers, m.num_moe_layers == m.num_layers and not m.hybrid_layer_pattern),
        ("no multi-token prediction", m.mtp_layers, not m.mtp_layers),
        ("no latent projections", f"moe_latent_size {m.moe_latent_size}", not m.moe_latent_size),
        ("full causal attention", f"window_size {m.window_size}", not m.window_size),
        ("one document per sequence", f"document_length {tr.document_length}", tr.document_length is None),
        ("every weight trained", f"lora_rank {tr.lora_rank}", not tr.lora_rank),
        ("optimizer adam or sgd", tr.optimizer, tr.optimizer != "muon"),
        ("recompute none, selective or full", tr.recompute, tr.recompute != "selective_op"
         and tr.recompute_modules == ("core_attn",))) if not ok]
    if problems:
        raise ScenarioError(f"{s.source}: the MoE emulator runs EP folded onto data with GPipe: " + "; ".join(problems))
    return TinyMoE(vocab=m.vocab_size, hidden=m.hidden_size, heads=m.num_attention_heads, layers=m.num_layers,
                   experts=m.num_experts, top_k=m.moe_top_k, ffn=m.moe_ffn, seq=m.seq_length,
                   micro_batch=tr.micro_batch_size, microbatches=s.num_microbatches, dtype="float32")


def measured_steps(events: list[dict], warmup: int) -> list[dict]:
    """Per timed step: its wall time (slowest rank) and the thread CPU time of its busiest rank."""
    out = []
    for step in sorted({e["step"] for e in events if e["step"] >= warmup}):
        ev = [e for e in events if e["step"] == step and e["kind"] == "STEP"]
        out.append({"step": step, "step_time_s": max(e["end"] - e["start"] for e in ev),
                    "cpu_s": max(e["cpu_s"] or 0.0 for e in ev)})
    return out


def core_share_speeds(s, events, cores: int) -> dict[int, float]:
    """Processor sharing of pinned cores (rank g = stage·EP + j on core g mod cores, as the MoE
    emulator pins them): while n ranks of a core compute, each advances at 1/n of its speed
    (a rank waiting in a gloo receive sleeps and leaves the core to the others). Per pipeline
    stage, its mean speed over the time it computes in the simulated step `events` (compute
    stream); keyed by the global ranks of the stage (heterogeneity.rank_speed)."""
    from pipesim.costs.topology import rank_of
    ep, pp = s.parallel.expert, s.parallel.pipeline
    busy = {k: [(e.start, e.end) for e in events if e.rank == k and e.stream == "compute" and e.end > e.start]
            for k in range(pp)}
    ticks = sorted({t for ivs in busy.values() for iv in ivs for t in iv})

    def on_core(k, c):      # ranks of stage k pinned to core c
        return sum(1 for j in range(ep) if (k * ep + j) % cores == c)

    speeds = {}
    for k in range(pp):
        core = (k * ep) % cores
        time_busy = progress = 0.0
        for a, b in zip(ticks, ticks[1:]):
            mid = (a + b) / 2
            if not any(x <= mid < y for x, y in busy[k]):
                continue
            load = sum(on_core(q, core) for q in range(pp) if any(x <= mid < y for x, y in busy[q]))
            time_busy += b - a
            progress += (b - a) / max(1, load)
        speed = progress / time_busy if time_busy else 1.0
        for d in range(s.parallel.data):
            speeds[rank_of(s, dp=d, pp=k)] = speed
    return speeds


def _simulate_on(s, profile_path: str, sharing: str = "static"):
    """(stage costs, report dict) of `s` on the calibrated profile (host model applied). sharing:
    "static" = the host model's cores / ranks share for every rank, "none" = full speed,
    "dynamic" = processor sharing of the pinned cores (core_share_speeds), iterated to a fixed
    point from full speed."""
    from dataclasses import replace

    from pipesim.calibrate.host import with_host_model
    from pipesim.costs import stage_costs
    from pipesim.emulator import prepare
    from pipesim.sim import simulate
    sc = with_host_model(prepare(s, [f"costs.profile={os.path.abspath(profile_path)}"]))

    def with_speeds(speeds):
        het = replace(sc.system.heterogeneity, rank_speed=speeds)
        return replace(sc, system=replace(sc.system, heterogeneity=het))
    if sharing != "static":
        sc = with_speeds({})
    if sharing == "dynamic":
        cores = sc_cores(profile_path)
        for _ in range(DYNAMIC_ITERATIONS):
            sc = with_speeds(core_share_speeds(sc, simulate(sc).events, cores))
    return stage_costs(sc), simulate(sc, trace=False).to_dict()


DYNAMIC_ITERATIONS = 6


def sc_cores(profile_path: str) -> int:
    with open(profile_path) as fh:
        return json.load(fh)["device"]["host"]["layout"]["cores"]


def crosscheck_scenario(s, steps: int = 6, warmup: int = 2, timeout: float = 300.0, nice: int = 20,
                        pin: bool = True, budget_s: float = 0.1) -> dict:
    """Emulate (float32, calibrated in the ranks) and simulate an MoE scenario; per action mean
    seconds, measured vs simulated: F and B per stage, one all-to-all (dispatch or combine), the
    step (median over the timed steps)."""
    from pipesim.emulator.moe import RunOptions, run
    from pipesim.emulator.moe_calibration import merge_moe_profiles
    from pipesim.emulator.rank_calibration import read_parts
    cfg = config_of(s)
    ep, pp = s.parallel.expert, s.parallel.pipeline
    world = ep * pp
    res = run(ep, pp, cfg, timeout=timeout, opts=RunOptions(steps=steps, warmup=warmup, pin=pin, nice=nice, calibrate=s,
                                                                budget_s=budget_s))
    out_dir = res["out_dir"]
    paths = {}
    for when, parts in (("", read_parts(out_dir, world, "before") + read_parts(out_dir, world, "after")),
                        (".before", read_parts(out_dir, world, "before")),
                        (".after", read_parts(out_dir, world, "after"))):
        paths[when] = os.path.join(out_dir, f"profile{when}.json")
        with open(paths[when], "w") as fh:
            json.dump(merge_moe_profiles(s, parts, world), fh, indent=1)
    with open(paths[""]) as fh:
        layout = json.load(fh)["device"]["host"]["layout"]
    shared = "dynamic" if layout["oversubscription"] > 1 else "static"
    costs, sim = _simulate_on(s, paths[""], shared)
    drift_t = [_simulate_on(s, paths[w], shared)[1]["step_time_s"] for w in (".before", ".after")]
    measured = [e for e in res["events"] if e["step"] >= warmup]
    rows = []
    for k in range(pp):
        ranks = range(k * ep, (k + 1) * ep)
        for kind, sec in (("F", costs[k].forward), ("B", costs[k].backward)):
            got = [e["end"] - e["start"] for e in measured if e["kind"] == kind and e["rank"] in ranks]
            # the mean, as the dense crosscheck's per-kind rows: a step sums its actions, and the
            # exchanges inside them wait bimodally (0.2 ms or 2-5 ms on the 2-core VM)
            rows.append({"action": f"{kind} stage {k}", "measured_s": statistics.fmean(got), "simulated_s": sec})
        a2a = [e["end"] - e["start"] for e in measured if e["kind"] == "A2A" and e["rank"] in ranks
               and e["label"].startswith(("dispatch", "combine")) and not e["label"].endswith("_bwd")]
        if ep > 1:
            one = costs[k].ep_comm_bwd / max(1, 2 * costs[k].moe_layers)    # one dispatch or combine
            rows.append({"action": f"A2A stage {k}", "measured_s": statistics.fmean(a2a), "simulated_s": one})
    per_step = measured_steps(res["events"], warmup)
    step = statistics.median(st["step_time_s"] for st in per_step)
    rows.append({"action": "step", "measured_s": step, "simulated_s": sim["step_time_s"]})
    for r in rows:
        r["error_pct"] = 100 * (r["simulated_s"] / r["measured_s"] - 1) if r["measured_s"] else None
    out = {"ep": ep, "pp": pp, "rows": rows, "step_error_pct": rows[-1]["error_pct"], "steps": per_step,
           "drift_pct": 100.0 * abs(drift_t[0] - drift_t[1]) / (drift_t[0] + drift_t[1]), "profile": paths[""],
           # ~95 % interval of the median step: 1.96 x 1.2533 sigma / sqrt(n) (Kenney & Keeping 1962,
           # Sec. 13.13), as the dense crosscheck's median_interval_pct
           "step_spread_pct": 100.0 * 1.96 * 1.2533 * statistics.pstdev(st["step_time_s"] for st in per_step)
           / len(per_step) ** 0.5 / step}
    out["layout"] = layout
    if shared == "dynamic":
        for how in ("none", "static"):
            t = _simulate_on(s, paths[""], sharing=how)[1]["step_time_s"]
            out[f"sharing_{how}"] = {"simulated_s": t, "error_pct": 100 * (t / step - 1)}
    return out


def format_crosscheck(result: dict) -> str:
    lay = result["layout"]
    lines = [f"tiny MoE on {result['ep'] * result['pp']} CPU ranks (EP {result['ep']} x PP {result['pp']}, gloo; "
             f"{lay['cores']} cores, {lay['oversubscription']:.1f}x oversubscribed)",
             f"  {'action':14s} {'measured ms':>12s} {'simulated ms':>13s} {'err %':>7s}"]
    for r in result["rows"]:
        lines.append(f"  {r['action']:14s} {1e3 * r['measured_s']:12.3f} {1e3 * r['simulated_s']:13.3f} "
                     f"{r['error_pct']:+7.1f}")
    lines.append(f"step error {result['step_error_pct']:+.1f} % (median of {len(result['steps'])} steps, "
                 f"±{result['step_spread_pct']:.1f} % at 95 %; op costs drifted ±{result['drift_pct']:.1f} % "
                 f"between the calibrations before and after them); profile {result['profile']}")
    if "sharing_none" in result:
        f, d = result["sharing_none"], result["sharing_static"]
        lines.append(f"the ranks share the cores: simulated with processor sharing of the pinned cores (above); "
                     f"bounds: every rank at full speed {1e3 * f['simulated_s']:.3f} ms ({f['error_pct']:+.1f} %), "
                     f"every rank at cores/ranks of its speed all the time {1e3 * d['simulated_s']:.3f} ms "
                     f"({d['error_pct']:+.1f} %)")
    return "\n".join(lines)
