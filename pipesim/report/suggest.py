"""The suggestions of the "why" (pipesim/report/explain.py): candidate changes to a scenario (the
partitioner's split, layers moved off the busiest rank, half the micro-batch, zero-bubble or
interleaved schedules, less recompute, sharding replicas, other context-parallel exchanges or a
smaller context size, rank orders inside pods, 8-bit activations), each simulated; those that fit
in memory and shorten the step by >= 2 % are listed, fastest first. A step that does not fit also
tries what frees memory (offloading activations to the host, recomputation, ZeRO, more context,
tensor or pipeline parallelism) and lists every change that makes it fit, fastest first, or failing
that the changes together.
"""
from __future__ import annotations

import time

# what the norm kernels wait for (costs/norm_kernels.py norm_wait), by (data-parallel, all-to-all)
NEIGHBOURS = {(True, False): "data-parallel collectives", (False, True): "MoE dispatcher's kernels",
              (True, True): "data-parallel collectives and the MoE dispatcher's kernels"}
MIN_GAIN = 0.02              # a suggestion must shorten the step by at least 2 %
PIPELINE_SIZES = (2, 4, 8, 16)   # pipeline sizes a step out of memory may try
SUGGESTION_BUDGET_S = 20.0   # stop trying candidates after this much simulation time


def variant(s, changes: dict):
    """The scenario with `changes` ({"parallel.layers_per_stage": [...], ...}) applied, validated."""
    from pipesim.scenario.load import load_scenario, scenario_to_dict
    raw = scenario_to_dict(s)
    if changes.get("training.recompute", "selective") != "selective":
        # selective's submodules do not carry over to another recompute policy
        raw["training"] = {k: v for k, v in raw["training"].items() if k != "recompute_modules"}
    for key, value in changes.items():
        section, name = key.split(".", 1)
        raw[section] = dict(raw[section], **{name: value})
    return load_scenario(raw)


def partition_split(s) -> tuple[list[int], str] | None:
    """layers_per_stage of `pipesim partition` for this scenario (capped at the GPU memory) and the
    command that reproduces it; None where it does not apply."""
    from pipesim.errors import PipesimError
    from pipesim.partition.cluster import cluster_from_system
    from pipesim.partition.report import build_report
    from pipesim.partition.solve import partition
    from pipesim.partition.stages import Options
    from pipesim.partition.transformer import transformer_graph
    from pipesim.costs.memory import static_bytes_per_param
    p = s.parallel.pipeline
    if s.model.arch != "transformer" or p < 2 or s.parallel.virtual_stages != 1:
        return None
    tr = s.training
    cap = s.system.gpu.memory
    opts = Options(recompute=tr.recompute == "full", memory_cap=cap, microbatches=p, schedule="1f1b",
                   static_bytes_per_param=static_bytes_per_param(s))
    try:
        g = transformer_graph(s, "layer")
        cluster = cluster_from_system(s.system, slot_width=s.parallel.tensor)
        part = partition(g, p, cluster, opts)
        lps = build_report(g, part, cluster, opts).get("layers_per_stage")
    except PipesimError:
        return None
    if not lps:
        return None
    cmd = (f"pipesim partition {s.source} --stages {p} --memory-cap-GiB {cap / 2**30:g}"
           + (" --recompute" if opts.recompute else ""))
    return list(lps), cmd


def candidates(s, report) -> list[tuple[str, dict, str]]:
    """(title, changes, how) to simulate, most promising first."""
    tr, par = s.training, s.parallel
    out = []
    split = partition_split(s)
    if split and tuple(split[0]) != tuple(s.layers_per_stage()):
        out.append((f"layers_per_stage {split[0]}", {"parallel.layers_per_stage": split[0]},
                    f"`{split[1]}` proposes it; --set parallel.layers_per_stage=[{','.join(map(str, split[0]))}]"))
    moved = rebalanced_split(s, report)
    if moved and (not split or tuple(moved) != tuple(split[0])):
        out.append((f"layers from the busiest ranks to the idlest: layers_per_stage {moved}",
                    {"parallel.layers_per_stage": moved},
                    f"--set parallel.layers_per_stage=[{','.join(map(str, moved))}]"))
    if par.pipeline > 1 and tr.micro_batch_size % 2 == 0:
        half = tr.micro_batch_size // 2
        out.append((f"micro_batch_size {half}", {"training.micro_batch_size": half},
                    f"--set training.micro_batch_size={half} (twice the micro-batches: shorter fill/drain)"))
    if par.pipeline > 1 and tr.schedule == "1f1b" and par.virtual_stages == 1:
        out.append(("schedule zb-h1", {"training.schedule": "zb-h1"},
                    "--set training.schedule=zb-h1 (zero-bubble: weight gradients fill the drain, 1F1B memory)"))
        if par.layers_per_stage is None and s.model.num_layers % (2 * par.pipeline) == 0 \
                and s.num_microbatches % par.pipeline == 0:
            out.append(("interleaved, 2 chunks per rank",
                        {"training.schedule": "interleaved", "parallel.virtual_stages": 2},
                        "--set training.schedule=interleaved --set parallel.virtual_stages=2"))
    if tr.recompute != "none":
        lighter = "selective" if tr.recompute == "full" and s.model.arch == "transformer" else "none"
        out.append(recompute_candidate(s, lighter))
    margin = gemm_margin_candidate(s, report)
    if margin:
        out.append((f"gemm_sm_margin {margin}", {"training.gemm_sm_margin": margin},
                    f"--set training.gemm_sm_margin={margin} (NVTE_EXT_MARGIN_SM: the GEMMs leave the data-parallel "
                    f"collectives' {margin} SMs free, no second wave beside them)"))
    from pipesim.costs.norm_kernels import norm_wait
    wait = norm_wait(s)
    if wait:
        out.append((f"norm_sm_margin {wait['sms']}", {"training.norm_sm_margin": wait["sms"]},
                    f"--set training.norm_sm_margin={wait['sms']} (NVTE_FWD/BWD_LAYERNORM_SM_MARGIN: the norm "
                    f"kernels fit beside the {NEIGHBOURS[bool(wait['dp']), bool(wait['a2a'])]})"))
    replicas = island_replicas(s)
    zero_comm = sum(report.data.get("exposed_comm_s", {}).get(k, 0.0) for k in ("DP", "ZERO_GATHER", "ZERO_ALLGATHER"))
    if replicas > 1 and zero_comm > 0.02 * report.data["step_time_s"]:
        out.append((f"{replicas} sharding replicas (one per NVLink island)", {"training.zero_replicas": replicas},
                    f"--set training.zero_replicas={replicas} (ZeRO gathers inside the island, one all-reduce "
                    f"of the shard across)"))
    cp = report.data.get("exposed_comm_s", {}).get("CP", 0.0)
    if par.context > 1 and cp > 0.02 * report.data["step_time_s"]:
        # the other K/V exchanges (pipesim.costs.context); those the model cannot run are refused
        # by the loader and skipped
        for mode in ("ring", "allgather", "a2a"):
            if mode != par.context_mode:
                out.append((f"context_mode {mode}", {"parallel.context_mode": mode, "parallel.context_a2a": None},
                            f"--set parallel.context_mode={mode}"))
        # or a smaller ring, its GPUs to data parallelism: more attention per rank to hide each hop
        # under, fewer hops (packed short documents leave little attention; costs/documents.py)
        smaller = layout_candidate(s, context=par.context // 2)
        if smaller:
            out.append(smaller)
    exposed = report.data.get("exposed_comm_s", {})
    if s.system.pod_gpus and sum(exposed.values()) > 0.02 * report.data["step_time_s"]:
        # pods behind an oversubscribed layer: the orders that keep pipelines, or data-parallel
        # replicas, inside a pod (costs/pods.py; Llama 3 puts data parallelism outermost)
        from pipesim.costs.topology import rank_order
        for order in ("tp-cp-pp-dp", "tp-cp-dp-pp"):
            if order.split("-") != rank_order(s):
                out.append((f"rank_order {order}", {"parallel.rank_order": order}, f"--set parallel.rank_order={order}"))
    if exposed.get("EP_A2A", 0.0) > 0.02 * report.data["step_time_s"]:
        out += a2a_candidates(s)
    if exposed.get("TP", 0.0) > 0.02 * report.data["step_time_s"]:
        out += tp_candidates(s)
    p2p = exposed.get("P2P", 0.0)
    if par.pipeline > 1 and tr.activation_compression_bits == 16 and p2p > 0.02 * report.data["step_time_s"]:
        out.append(("8-bit activations between stages", {"training.activation_compression_bits": 8},
                    "--set training.activation_compression_bits=8"))
    if report.data.get("oom"):
        out += memory_candidates(s)
    return out


def tp_candidates(s) -> list[tuple[str, dict, str]]:
    """Exposed tensor-parallel collectives: Megatron's asynchronous input-gradient collective,
    then the collectives pipelined with their GEMMs (needs sequence parallelism, as Megatron's
    --tp-comm-overlap does)."""
    tr, par = s.training, s.parallel
    out = []
    if not tr.tp_grad_overlap and not tr.overlap_tp_comm:
        out.append(("tp_grad_overlap", {"training.tp_grad_overlap": True},
                    "--set training.tp_grad_overlap=true (the input-gradient collective beside the weight-gradient GEMM)"))
    if not tr.overlap_tp_comm and par.sequence_parallel and par.tensor_mode == "1d":
        out.append(("overlap_tp_comm", {"training.overlap_tp_comm": True},
                    "--set training.overlap_tp_comm=true (Megatron --tp-comm-overlap: each collective pipelined "
                    "with its GEMM)"))
    return out


def a2a_candidates(s) -> list[tuple[str, dict, str]]:
    """An exposed expert all-to-all: hide it under the paired micro-batch (A2A overlap), send each
    token once per rank (a fused dispatcher), or give a fused dispatcher whose SMs set its pace
    more of them (costs/moe_dispatch.py; the overlap's compute then runs on fewer)."""
    from pipesim.costs.moe_dispatch import DEFAULT_SMS, dispatcher_sms, pace
    tr = s.training
    out = []
    if not tr.moe_a2a_overlap:
        out.append(("A2A overlap", {"training.moe_a2a_overlap": True}, "--set training.moe_a2a_overlap=true"))
    if tr.moe_dispatcher == "alltoall":
        for name in DEFAULT_SMS:
            out.append((f"moe_dispatcher {name}", {"training.moe_dispatcher": name},
                        f"--set training.moe_dispatcher={name}"))
    elif (p := pace(s)) is not None and p["bound"] == "kernel":
        more = 2 * dispatcher_sms(s)
        out.append((f"{more} dispatcher SMs", {"training.moe_dispatcher_sms": more},
                    f"--set training.moe_dispatcher_sms={more}"))
    return out


def rebalanced_split(s, report) -> list[int] | None:
    """layers_per_stage rebalanced greedily: while it lowers the busiest pipeline rank's compute,
    move one layer from that rank's heaviest model chunk to the idlest rank's lightest chunk (any
    schedule and chunk count; the layers stay in order), a layer costing the median per-layer time
    of the chunks without the embedding or the head. None where nothing moves."""
    if s.model.arch != "transformer" or s.parallel.pipeline < 2:
        return None
    times = report.data.get("stage_times_s") or {}
    fwd, bwd = times.get("forward"), times.get("backward")
    lps = list(s.layers_per_stage())
    ranks = [r["stages"] for r in report.data.get("ranks", ()) if r.get("stages")]
    if not fwd or not bwd or len(fwd) != len(lps) or len(ranks) < 2:
        return None
    est = [f + b for f, b in zip(fwd, bwd)]
    inner = sorted(est[k] / lps[k] for k in range(1, len(lps) - 1) if lps[k]) or [est[0] / max(lps[0], 1)]
    layer = inner[len(inner) // 2]
    moved = list(lps)
    for _ in range(sum(lps)):
        load = [sum(est[k] for k in stages) for stages in ranks]
        slow, fast = max(range(len(ranks)), key=load.__getitem__), min(range(len(ranks)), key=load.__getitem__)
        donors = [k for k in ranks[slow] if moved[k] >= 2]
        if not donors or load[slow] - load[fast] <= layer:
            break                # one more layer would only turn the imbalance around
        donor, receiver = max(donors, key=est.__getitem__), min(ranks[fast], key=est.__getitem__)
        moved[donor] -= 1
        moved[receiver] += 1
        est[donor] -= layer
        est[receiver] += layer
    return moved if moved != lps else None


def island_replicas(s) -> int:
    """Sharding replicas that put each ZeRO shard group inside one NVLink island: the gradient
    group's ranks over its members per island, when a ZeRO stage shards and an island holds 2+."""
    from pipesim.costs.topology import placement
    tr = s.training
    if tr.zero_stage < 1 or tr.zero_replicas != 1 or s.model.arch != "transformer":
        return 1
    group = placement(s, "dp_cp")
    if group.per_node < 2 or group.size <= group.per_node or group.size % group.per_node:
        return 1
    return group.size // group.per_node


def recompute_candidate(s, rc: str) -> tuple[str, dict, str]:
    """Another recompute policy; a scenario's own selective submodules reset with it (the loader
    refuses them under another policy)."""
    how = f"--set training.recompute={rc}"
    if rc != "selective" and s.training.recompute_modules != ("core_attn",):
        how += " --set training.recompute_modules=[core_attn]"
    return f"recompute {rc}", {"training.recompute": rc}, how


def memory_candidates(s) -> list[tuple[str, dict, str]]:
    """What frees GPU memory, for a step that does not fit: offloading every layer's activations
    to a host with a measured copy rate, LoRA adapters re-gathering their input, recomputation,
    the distributed optimizer / ZeRO-3, 16-bit optimizer states (BF16 moments, master remainders)."""
    from pipesim.scenario.checks import master_remainders_refusal
    tr, par = s.training, s.parallel
    out = [offload_candidate(s), lora_regather_candidate(s)]
    levels = ("none", "selective", "selective_op", "full")      # less kept, more re-run
    for rc in levels[levels.index(tr.recompute) + 1:]:
        out.append(recompute_candidate(s, rc))
    out += [zero_candidate(s, z) for z in (1, 3)]
    if (tr.optimizer != "sgd" and tr.optimizer_state_dtype == "fp32" and tr.precision not in ("fp32", "tf32")
            and s.model.arch == "transformer"):
        out.append(("BF16 Adam moments", {"training.optimizer_state_dtype": "bf16"},
                    "--set training.optimizer_state_dtype=bf16 (Megatron-Core's precision-aware optimizer)"))
    if tr.master_weights == "fp32" and master_remainders_refusal(tr) is None:
        out.append(("master weights as 16-bit remainders", {"training.master_weights": "remainders"},
                    "--set training.master_weights=remainders (TE FusedAdam store_param_remainders)"))
    out += [layout_candidate(s, context=c) for c in _more(par.context, long_context_sizes(s))]
    out += [layout_candidate(s, tensor=t) for t in _more(par.tensor, tensor_sizes(s))]
    out += [layout_candidate(s, pipeline=p) for p in _more(par.pipeline, PIPELINE_SIZES)]
    return [c for c in out if c is not None]


def lora_regather_candidate(s):
    """LoRA adapters beside column-parallel linears keeping their sequence shard instead of the
    gathered input (training.lora_sp_regather), where Megatron-Bridge allows it; or None."""
    tr, par = s.training, s.parallel
    if (not tr.lora_rank or tr.lora_sp_regather or not (par.sequence_parallel and par.tensor > 1)
            or tr.cuda_graphs != "none" or tr.recompute == "full"):
        return None
    return ("LoRA input re-gather", {"training.lora_sp_regather": True},
            "--set training.lora_sp_regather=true (Megatron-Bridge's sequence_parallel_input_regather)")


def offload_candidate(s):
    """Every layer's activations offloaded to a host with a measured copy rate, or None."""
    chunk = max(s.layers_per_stage())
    if not s.system.host_link_GBps or s.training.offload_activation_layers >= chunk:
        return None
    return (f"offload {chunk} layers' activations", {"training.offload_activation_layers": chunk},
            f"--set training.offload_activation_layers={chunk}")


def zero_candidate(s, stage: int):
    """A higher ZeRO stage over the data x context group, or None."""
    if s.parallel.data * s.parallel.context < 2 or stage <= s.training.zero_stage:
        return None
    return f"ZeRO-{stage}", {"training.zero_stage": stage}, f"--set training.zero_stage={stage}"


def _more(current: int, sizes) -> list[int]:
    return [k for k in sizes if k > current]


def long_context_sizes(s) -> list[int]:
    """Context-parallel sizes worth trying for a step out of memory: the sequence is long (8K+
    tokens) and causal, as the load-balanced split needs; the activations shrink by CP."""
    m = s.model
    if s.model.arch != "transformer" or not m.causal or m.seq_length < 8192:
        return []
    return [c for c in (2, 4, 8, 16, 32) if m.seq_length % (2 * c) == 0]


def tensor_sizes(s) -> list[int]:
    """Tensor-parallel sizes inside the NVLink island (with sequence parallelism)."""
    if s.model.arch != "transformer":
        return []
    return [t for t in (2, 4, 8) if t <= s.system.island]


def layout_candidate(s, tensor: int | None = None, context: int | None = None, pipeline: int | None = None):
    """The layout with the given tensor, context and pipeline sizes (the others as they are), the
    GPUs taken from data parallelism; sequence parallelism with TP, one chunk per pipeline rank
    and Megatron's uneven split where the layers do not divide. (title, changes, how), or None if
    the sizes do not divide the data-parallel width or a stage would hold no layer."""
    par = s.parallel
    t, c, p = tensor or par.tensor, context or par.context, pipeline or par.pipeline
    width = par.tensor * par.context * par.pipeline * par.data
    if width % (t * c * p) or p > s.model.num_layers or (p != par.pipeline and par.virtual_stages != 1):
        return None
    data = width // (t * c * p)
    changes = {"parallel.tensor": t, "parallel.context": c, "parallel.data": data,
               "parallel.sequence_parallel": par.sequence_parallel or t > 1}
    if p != par.pipeline:
        changes.update({"parallel.pipeline": p,
                        "parallel.layers_per_stage": None if s.model.num_layers % p == 0 else "auto"})
        if s.training.schedule not in ("1f1b", "gpipe", "zb-h1"):
            changes["training.schedule"] = "1f1b"
    now = {"parallel.tensor": par.tensor, "parallel.context": par.context, "parallel.data": par.data,
           "parallel.sequence_parallel": par.sequence_parallel, "parallel.pipeline": par.pipeline,
           "parallel.layers_per_stage": par.layers_per_stage, "training.schedule": s.training.schedule}
    shown = lambda v: "null" if v is None else str(v).lower() if isinstance(v, bool) else v
    how = " ".join(f"--set {k}={shown(v)}" for k, v in changes.items() if v != now[k])
    parts = [f"{name} {size}" for name, size, old in (("tensor", t, par.tensor), ("context", c, par.context),
                                                        ("pipeline", p, par.pipeline)) if size != old]
    return " x ".join(parts) + f" (data {data})", changes, how


def stacked_memory_fix(s, mode: str, budget_s: float):
    """For a step that no single change makes fit: the memory changes applied together, one more
    at a time (recomputation, ZeRO-3, then context, tensor and pipeline parallelism from the
    smallest, then activation offloading), until the step fits; (title, changes, how, report) or
    None."""
    from pipesim.errors import PipesimError
    from pipesim.sim import simulate
    par = s.parallel
    steps: list = [recompute_candidate(s, "full") if s.training.recompute != "full" else None, zero_candidate(s, 3)]
    steps += [("context", c) for c in _more(par.context, long_context_sizes(s))]
    steps += [("tensor", t) for t in _more(par.tensor, tensor_sizes(s))]
    steps += [("pipeline", p) for p in _more(par.pipeline, PIPELINE_SIZES)]
    steps.append(offload_candidate(s))
    t0, settings, layout = time.perf_counter(), [], {}
    for step in (x for x in steps if x is not None):
        if time.perf_counter() - t0 > budget_s:
            return None
        if len(step) == 2:                       # a layout size: the sizes so far, data re-derived
            trial = dict(layout, **{step[0]: step[1]})
            found = layout_candidate(s, **trial)
            if found is None:
                continue
            layout = trial
        else:
            settings.append(step)
        parts = settings + ([layout_candidate(s, **layout)] if layout else [])
        changes = {k: v for _, more, _ in parts for k, v in more.items()}
        try:
            r = simulate(variant(s, changes), mode=mode, trace=False)
        except PipesimError:
            continue
        if not r.data["oom"]:
            return (" + ".join(title for title, _, _ in parts), changes, " ".join(how for _, _, how in parts if how),
                    r.data)
    return None


def gemm_margin_candidate(s, report) -> int:
    """The GEMM SM margin worth simulating: the data-parallel collectives' SMs, when the compute
    beside them loses over 2 % of the step and the GPU's GEMMs are static persistent kernels (a
    late CTA walks its whole stride: costs/moe_interference.py); else 0."""
    from pipesim.costs.nccl_channels import dp_collective_sms
    from pipesim.costs.topology import placement
    from pipesim.presets.gpus import curve
    c = curve(s.system.gpu.kernel_curve)
    lost = max((r.get("compute_contention_s", 0.0) for r in report.data.get("ranks", [])), default=0.0)
    if not c or not c["persistent"] or c.get("clc") or lost <= MIN_GAIN * report.data["step_time_s"]:
        return 0
    held = dp_collective_sms(s, placement(s, "dp_cp"))
    return held if held > s.training.gemm_sm_margin else 0


def suggestions(s, report, mode: str, budget_s: float = SUGGESTION_BUDGET_S) -> list[dict]:
    from pipesim.errors import PipesimError
    from pipesim.sim import simulate
    step0 = report.data["step_time_s"]
    out = []
    t0 = time.perf_counter()
    for title, changes, how in candidates(s, report):
        if time.perf_counter() - t0 > budget_s:
            break
        try:
            r = simulate(variant(s, changes), mode=mode, trace=False).data
        except PipesimError:
            continue
        gain = 1 - r["step_time_s"] / step0 if step0 > 0 else 0.0
        # a step that does not fit takes any change that makes it fit; one that fits, a faster one
        if r["oom"] or (gain < MIN_GAIN and not report.data.get("oom")):
            continue
        out.append(_row(title, changes, how, r, step0))
    if report.data.get("oom") and not out:
        left = budget_s - (time.perf_counter() - t0)
        found = stacked_memory_fix(s, mode, left) if left > 0 else None
        if found:
            title, changes, how, r = found
            out.append(_row(f"together: {title}", changes, how, r, step0))
    out.sort(key=lambda x: x["step_time_s"])
    return out


def _row(title: str, changes: dict, how: str, r: dict, step0: float) -> dict:
    """One suggestion as the report lists it: the change and its simulated step (`r`)."""
    return {"title": title, "changes": changes, "how": how, "step_time_s": r["step_time_s"],
            "bubble_fraction": r["bubble_fraction"], "peak_memory_bytes": r["peak_memory_bytes"],
            "speedup": step0 / r["step_time_s"], "mfu": r["mfu"]}
