"""Validation family moezoo-qwen3: Qwen3-235B-A22B on 256 H100 from the Megatron MoE model zoo
(yanring/Megatron-MoE-ModelZoo, best_practice/Qwen3/readme.md; cases in
scenarios/validation/published.yaml). Metric: step time (the published iteration time), error
(predicted − published) / published; plus the A2A-overlap pair's gain.

Mapping of the published columns (nothing here is tuned on the cases):
  tp/pp/vp/ep/dp/micro/global batch -> parallel.* / training.* as published; sequence parallelism
    on (Megatron-Core requires it for MoE with tp > 1);
  fsdp 'on' -> zero_stage 3 (weights, gradients and optimizer sharded) with one gather and
    reduce-scatter per layer (Megatron-FSDP's unit is the transformer layer, as in
    validation_bridge_2604.py); otherwise Megatron's distributed optimizer -> zero_stage 1;
  recompute "norm, act" (Megatron-Core --recompute-modules layernorm moe_act) -> none: re-running
    norms and activations costs < 1 % of a layer's time; "full" -> full;
  moe_dispatcher as published; "A2A overlap" in the notes -> training.moe_a2a_overlap, and the
    norm kernels' SM margin the zoo's launcher sets with it (ZOO_NORM_SM_MARGIN);
  routing "not stated" -> balanced: the zoo's published H100 command for this model
    (best_practice/qwen3/run_h100_235b.sh) passes --moe-router-force-load-balancing;
  ETP 1 and EDP as in the README table's ETP / EDP columns (EDP is derived, and checked);
  BF16, fused (flash) attention, GPU H100-SXM5-80GB -> the dgx-h100 preset, 8 GPUs per node;
    the stack's software dated by the README (ZOO_README_DATE -> training.software_date: the cuDNN
    attention of that date).
The long-sequence series (16K-128K tokens, cp 1-8) publishes model TFLOP/s per GPU, forced-balance
and dropless, and is scored on that (issue 15's public CP cases): a predicted step becomes TFLOP/s
by Megatron-Core's own count (pipesim/costs/summary.py megatron_core_flops; the zoo logs Megatron's
figure), the forced-balance figure against moe_routing balanced, the dropless one against dropless.
Its settings are the README's command for that table: `--recompute-granularity selective
--recompute-modules layernorm moe`, A2A_OVERLAP=0, DeepEP. Context parallelism runs as ring CP with
the load-balanced layout (Megatron-Core's default p2p exchange, pipesim/whatif/validation_cp.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from pipesim.errors import PipesimError, ScenarioError

PREFIX = "moezoo-qwen3-235b-"
TARGET_MAPE = 10.0
# long-sequence series: pipesim routing -> the published column it is compared with
TFLOPS_COLUMNS = {"balanced": "model_tflops_per_gpu_force_balanced", "dropless": "model_tflops_per_gpu_dropless"}
# the zoo README's command for its long-context table (best_practice/qwen3/readme.md)
LONGSEQ_RECOMPUTE = ["layernorm", "moe"]
TARGET_CP_MAPE = 10.0      # issue 15: public CP cases
# Transformer Engine's norm SM margin by A2A overlap (training.norm_sm_margin): the zoo's
# sbatch_benchmarking.sh exports NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=24 with A2A_OVERLAP=1, else 0
ZOO_NORM_SM_MARGIN = {True: 24, False: 0}
OVERLAP_PAIR = ("moezoo-qwen3-235b-deepep-ep32-pp8", "moezoo-qwen3-235b-deepep-ep32-pp8-a2a-overlap")
# The cases' source, best_practice/Qwen3/readme.md at commit c1ad0b5, is dated 2025-11-04: the runs'
# software is no newer.
ZOO_README_DATE = "2025-11-04"
# The preset must match the published model block (checked, not assumed).
MODEL_KEYS = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
              "kv_heads": "num_kv_heads", "num_experts": "num_experts", "moe_top_k": "moe_top_k",
              "moe_ffn_hidden": "moe_ffn_hidden_size", "vocab": "vocab_size"}


@dataclass
class MoEResult:
    id: str
    published_s: float | None
    predicted_s: float | None
    error_pct: float | None
    note: str = ""
    report: dict | None = None
    budget: dict | None = None     # error_budget(): one MoE layer's terms and the gap per layer


def load_moe_cases(path=None) -> list[dict]:
    from pipesim.whatif.validation import DEFAULT_FILE, positive_number, read_cases
    cases = [c for c in read_cases(path or DEFAULT_FILE) if str(c.get("id", "")).startswith(PREFIX)]
    for c in cases:
        measured = c.get("measured")
        step = measured.get("iteration_time_s") if isinstance(measured, dict) else None
        if not isinstance(measured, dict) or not (step is None or positive_number(step)):
            raise ScenarioError(f"{path or DEFAULT_FILE}: {c['id']}: measured: expected a mapping with "
                                f"iteration_time_s (s) or the TFLOP/s columns, got {measured!r}")
    return cases


def is_tflops_case(case: dict) -> bool:
    """A long-sequence case: published as TFLOP/s per routing, with no iteration time."""
    return any(k in case.get("measured", {}) for k in TFLOPS_COLUMNS.values())


def moe_case_scenario(case: dict, routing: str = "balanced") -> dict:
    """The pipesim scenario (file keys) for a moezoo case."""
    from pipesim.presets.models import MODELS
    from pipesim.whatif.validation_cp import context_parallel
    cid, m, par, hw, tr = case["id"], case["model"], case["parallel"], case["hardware"], case.get("training", {})
    preset = MODELS["qwen3-235b-a22b"]
    for key, ours in MODEL_KEYS.items():
        if key in m and m[key] != preset[ours]:
            raise ScenarioError(f"{cid}: model.{key} = {m[key]} differs from the qwen3-235b-a22b preset "
                                f"({ours} = {preset[ours]})")
    if hw.get("gpu") != "H100-SXM5-80GB":
        raise ScenarioError(f"{cid}: hardware.gpu {hw.get('gpu')!r} has no system preset here")
    n, per_node = int(hw["num_gpus"]), int(hw.get("gpus_per_node", 8))
    tp, pp, vp, ep = (int(par.get(k, 1) or 1) for k in ("tp", "pp", "vp", "ep"))
    cp = int(par.get("cp", 1) or 1)
    dp = int(par.get("dp") or n // (tp * cp * pp))
    stages = pp * vp
    recompute = {"full": "full"}.get(str(tr.get("recompute", "none")).strip(), "none")
    overlap = "a2a overlap" in str(case.get("notes", "")).lower()
    modules = {}
    if is_tflops_case(case):
        recompute, modules = "selective", {"recompute_modules": LONGSEQ_RECOMPUTE}
    return {
        "model": {"preset": "qwen3-235b-a22b", "seq_length": int(m["seq_len"])},
        "system": {"preset": "dgx-h100", "num_nodes": n // per_node, "gpus_per_node": per_node},
        "parallel": {"tensor": tp, "pipeline": pp, "data": dp, "virtual_stages": vp, "expert": ep,
                     "expert_tensor": int(par.get("etp", 1) or 1),
                     "sequence_parallel": tp > 1, "layers_per_stage": embedding_aware_split(preset["num_layers"], stages),
                     **context_parallel(par, cid)},
        "training": {"micro_batch_size": int(par["micro_batch"]), "global_batch_size": int(par["global_batch"]),
                     "schedule": "interleaved" if vp > 1 else "1f1b", "recompute": recompute,
                     "precision": "bf16", "attention": "flash", "tp_grad_overlap": True,
                     **({"zero_stage": 3, "zero3_collectives": "layer"} if str(par.get("fsdp")).lower() == "on"
                        else {"zero_stage": 1}),
                     "moe_dispatcher": tr.get("moe_dispatcher", "alltoall"), "moe_a2a_overlap": overlap,
                     "moe_routing": routing, "norm_sm_margin": ZOO_NORM_SM_MARGIN[overlap],
                     "software_date": ZOO_README_DATE, **modules},
    }


def embedding_aware_split(layers: int, stages: int) -> list[int]:
    """Layers per model stage when they do not divide evenly: every stage gets ceil(L/S) and the
    first and last stages (which also hold the embedding and the LM head + loss) give up the
    surplus in turn (Megatron-Core --account-for-embedding-in-pipeline-split and
    --account-for-loss-in-pipeline-split)."""
    base = -(-layers // stages)
    split = [base] * stages
    surplus, k = base * stages - layers, 0
    while surplus > 0:
        idx = 0 if k % 2 == 0 else stages - 1
        if split[idx] == 0:
            idx = next(i for i in range(stages) if split[i] > 0)
        split[idx] -= 1
        surplus -= 1
        k += 1
    return split


def run_moe_case(case: dict, evaluator=None) -> MoEResult:
    from pipesim.scenario.load import load_scenario
    if evaluator is None:
        from pipesim.whatif.evaluate import detailed_report as evaluator
    published = case.get("measured", {}).get("iteration_time_s")
    try:
        rep = evaluator(load_scenario(moe_case_scenario(case)), "representative")
    except PipesimError as exc:
        return MoEResult(case["id"], published, None, None, note=str(exc).splitlines()[0])
    step = rep["step_time_s"]
    note = "out of memory in pipesim" if rep.get("oom") else ""
    if published is None:
        return MoEResult(case["id"], None, step, None, note=note or "published as TFLOP/s only", report=rep)
    scenario = load_scenario(moe_case_scenario(case))
    return MoEResult(case["id"], float(published), step, 100.0 * (step - published) / published, note, rep,
                     error_budget(scenario, step, float(published)))


def error_budget(s, predicted: float, published: float) -> dict:
    """One MoE layer per micro-batch on one GPU (compute forward/backward, all-to-all, the host
    term) and the step-time gap spread over the (forward + backward) layer passes of one pipeline
    rank: a diagnosis of where the missing time must sit, not a model input."""
    from pipesim.costs.layers import shapes_of
    from pipesim.costs.stage import cost_model_for, moe_stage_parts
    cm = cost_model_for(s)
    moe = moe_stage_parts(s, cm, shapes_of(s))
    attention = moe.ops[:[o.name for o in moe.ops].index("router")]     # the layer before its MoE block
    att_f = sum(cm.time(o, "fwd").seconds for o in attention)
    att_b = sum(cm.time(o, "bwd").seconds for o in attention)
    par, tr = s.parallel, s.training
    micro = tr.global_batch_size // (par.data * tr.micro_batch_size)
    pairs = micro * s.model.num_layers / par.pipeline
    return {"fwd_s": att_f + moe.block_fwd - moe.host_fwd, "bwd_s": att_b + moe.block_bwd, "a2a_fwd_s": moe.a2a.fwd,
            "a2a_bwd_s": moe.a2a.bwd, "host_fwd_s": moe.host_fwd, "layer_pairs_per_rank": pairs,
            "gap_per_layer_pair_s": (published - predicted) / pairs}


def run_moe_suite(path=None, evaluator=None) -> list[MoEResult]:
    """The step-time cases (the long-sequence series: run_longseq_suite)."""
    return [run_moe_case(c, evaluator) for c in load_moe_cases(path) if not is_tflops_case(c)]


@dataclass
class LongSeqResult:
    id: str
    routing: str
    published: float           # model TFLOP/s per GPU
    predicted: float | None
    step_s: float | None
    error_pct: float | None
    note: str = ""


def run_longseq_case(case: dict, routing: str, evaluator=None) -> LongSeqResult:
    from pipesim.costs.summary import megatron_core_flops
    from pipesim.scenario.load import load_scenario
    if evaluator is None:
        from pipesim.whatif.evaluate import detailed_report as evaluator
    published = float(case["measured"][TFLOPS_COLUMNS[routing]])
    try:
        s = load_scenario(moe_case_scenario(case, routing))
        rep = evaluator(s, "representative")
    except PipesimError as exc:
        return LongSeqResult(case["id"], routing, published, None, None, None, str(exc).splitlines()[0])
    step = rep["step_time_s"]
    pred = megatron_core_flops(s) / step / s.num_gpus / 1e12
    return LongSeqResult(case["id"], routing, published, pred, step, 100.0 * (pred - published) / published,
                         "out of memory in pipesim" if rep.get("oom") else "")


def run_longseq_suite(path=None, evaluator=None) -> list[LongSeqResult]:
    return [run_longseq_case(c, routing, evaluator) for c in load_moe_cases(path) if is_tflops_case(c)
            for routing in TFLOPS_COLUMNS if TFLOPS_COLUMNS[routing] in c["measured"]]


def format_longseq(results: list[LongSeqResult]) -> str:
    lines = ["moezoo-qwen3 long sequences  (model TFLOP/s per GPU by Megatron-Core's count; 256 H100, "
             "recompute layernorm + moe)",
             f"  {'case':40s} {'routing':>9s} {'step s':>8s} {'pred':>7s} {'pub':>5s} {'err %':>7s}"]
    for r in results:
        step = "-" if r.step_s is None else f"{r.step_s:.2f}"
        pred = "-" if r.predicted is None else f"{r.predicted:.1f}"
        err = "-" if r.error_pct is None else f"{r.error_pct:+.1f}"
        lines.append(f"  {r.id:40s} {r.routing:>9s} {step:>8s} {pred:>7s} {r.published:5.0f} {err:>7s}"
                     + (f"  {r.note}" if r.note else ""))
    m = moe_mape(results)
    lines.append(f"  MAPE {m:.1f} % over {sum(r.error_pct is not None for r in results)} cases "
                 f"(issue 15, public CP cases: target <= {TARGET_CP_MAPE:.0f} %: "
                 f"{'met' if m <= TARGET_CP_MAPE else 'MISSED'})")
    return "\n".join(lines)


def overlap_gain(results: list[MoEResult]) -> tuple[float, float] | None:
    """(predicted, published) step-time change in % of the A2A-overlap pair."""
    by = {r.id: r for r in results}
    a, b = (by.get(k) for k in OVERLAP_PAIR)
    if not a or not b or a.predicted_s is None or b.predicted_s is None:
        return None
    return (100 * (b.predicted_s / a.predicted_s - 1), 100 * (b.published_s / a.published_s - 1))


def moe_mape(results: list[MoEResult]) -> float:
    errs = [abs(r.error_pct) for r in results if r.error_pct is not None]
    return sum(errs) / len(errs) if errs else math.nan


def format_moe(results: list[MoEResult]) -> str:
    lines = ["moezoo-qwen3  (Qwen3-235B-A22B, 256 H100, step time in s; Megatron MoE model zoo)",
             f"  {'case':48s} {'pred s':>7s} {'pub s':>6s} {'err %':>7s}  a2a exposed s"]
    for r in results:
        pred = "-" if r.predicted_s is None else f"{r.predicted_s:.2f}"
        pub = "-" if r.published_s is None else f"{r.published_s:.1f}"
        err = "-" if r.error_pct is None else f"{r.error_pct:+.1f}"
        a2a = "" if not r.report else f"{r.report.get('moe', {}).get('a2a_exposed_s', 0.0):.2f}"
        lines.append(f"  {r.id:48s} {pred:>7s} {pub:>6s} {err:>7s}  {a2a:>6s}" + (f"  {r.note}" if r.note else ""))
        if r.budget:
            b = r.budget
            lines.append(f"      one MoE layer, ms: F {b['fwd_s'] * 1e3:.2f}  B {b['bwd_s'] * 1e3:.2f}  all-to-all "
                         f"{b['a2a_fwd_s'] * 1e3:.2f} + {b['a2a_bwd_s'] * 1e3:.2f}  host {b['host_fwd_s'] * 1e3:.3f}"
                         f";  gap per F+B layer on a rank {b['gap_per_layer_pair_s'] * 1e3:+.2f} "
                         f"(x {b['layer_pairs_per_rank']:.0f})")
    m = moe_mape(results)
    lines.append(f"  MAPE {m:.1f} % over {sum(r.error_pct is not None for r in results)} cases "
                 f"(target <= {TARGET_MAPE:.0f} %: {'met' if m <= TARGET_MAPE else 'MISSED'})")
    gain = overlap_gain(results)
    if gain:
        ok = abs(gain[0] - gain[1]) <= 3.0
        lines.append(f"  A2A overlap: {gain[0]:+.1f} % predicted vs {gain[1]:+.1f} % published "
                     f"(within ±3 points: {'met' if ok else 'MISSED'})")
    return "\n".join(lines)
