"""`pipesim search`: the best layout for a model on N GPUs under the GPU memory.

Two phases. (1) Enumerate the space (tensor, context, pipeline, data, virtual stages, micro-batch,
schedule, recompute, ZeRO stage, compression), drop impossible layouts with the loader's
reason, and screen every candidate with the closed-form model (pipesim.whatif.analytic: same
stage costs, bubble formulas instead of events) - memory over the GPU's and slow layouts go.
(2) Simulate the `finalists` best-screened candidates, plus every other candidate that the closed
form's measured error band (ERROR_BAND) cannot rule out of the top `finalists`, and rank them by
simulated throughput; `SearchResult.stages` counts what each stage kept. The axes are the fields
of SearchSpace plus `SearchSpace.extra` (any scenario key: context or expert parallelism, ...).
The answer explains why the winner wins and what the runner-up loses on, from the per-component
step-time breakdown.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

from pipesim.errors import ScenarioError
from pipesim.report.metrics import TIGHT_TEXT, memory_tight
from pipesim.scenario.stage_split import embedding_loss_split
from pipesim.whatif.analytic import analytic_report
from pipesim.whatif.evaluate import SCREENED_SCHEDULES, evaluate_all, simulate_report
from pipesim.whatif.grid import Prepared

GiB = 2**30
MICRO_BATCHES = (1, 2, 4, 8)
VIRTUAL = (2, 3, 4)
RECOMPUTE = ("none", "selective", "full")
COMPRESSION = (16, 8)
# Breakdown components of the screening model, with the words used in explanations.
COMPONENTS = {"compute_s": "compute", "pipeline_bubble_s": "pipeline bubble", "dp_comm_exposed_s":
              "exposed data-parallel communication", "p2p_fill_s": "pipeline send/recv latency",
              "optimizer_s": "optimizer step",
              "compute_contention_s": "SM contention beside data-parallel collectives"}
# Parts of `compute_s` worth naming when two layouts differ in them.
INSIDE_COMPUTE = {"cp_comm_exposed_s": "exposed context-parallel K/V exchange (in compute)"}


# Context parallelism is searched down to this many tokens per GPU (a search-space bound, not a
# cost): below a 4K-token shard long-sequence recipes add data parallelism instead (Llama 3 kept
# 8K tokens per GPU at 128K with CP16, Dubey et al. 2024 Table 4).
MIN_CP_TOKENS = 4096


@dataclass
class SearchSpace:
    tensor: tuple = ()
    pipeline: tuple = ()
    context: tuple = ()           # CP sizes; () = powers of two down to MIN_CP_TOKENS per GPU
    micro_batch: tuple = MICRO_BATCHES
    schedules: tuple = ("1f1b", "interleaved", "zb-h1", "zb-v")
    recompute: tuple = RECOMPUTE
    zero: tuple = (0, 1, 2, 3)
    compression: tuple = COMPRESSION
    extra: dict = field(default_factory=dict)
    """More axes: dotted scenario key -> values, multiplied into the space (e.g. the context- or
    expert-parallel sizes of issues 14/15, `training.moe_dispatcher`, ...). Keys listed in
    GPU_AXES also divide the GPU count, so data parallelism shrinks with them."""


# Parallel sizes that multiply with tensor and pipeline into the GPU count (data = GPUs / product);
# an axis that shares GPUs with data parallelism instead (expert parallelism) is not listed here.
GPU_AXES = {"parallel.context"}
# An axis whose values beyond a chunk's layer count are all one candidate (every layer offloaded).
OFFLOAD = "training.offload_activation_layers"
CP_MODE = "parallel.context_mode"        # meaningful with context > 1 only


@dataclass
class SearchResult:
    gpus: int
    considered: int
    pruned: dict = field(default_factory=dict)          # reason -> count
    screened_oom: int = 0
    simulated: int = 0
    finalists: list = field(default_factory=list)       # rows (simulated), best first
    best: dict | None = None
    runner_up: dict | None = None
    explanation: list = field(default_factory=list)
    stages: dict = field(default_factory=dict)          # pruning stage -> configurations kept


def system_for(raw_system, gpus: int) -> dict:
    """The base system section resized to `gpus` GPUs (whole nodes, or one partial node). An
    NVLink domain that spans nodes (NVL72) and does not divide the GPUs shrinks to the largest
    number of whole trays that does (racks partly in use, as NVIDIA's own 64- and 256-GPU GB200
    runs are laid out); `nvlink_domain_note` says so."""
    sysd, gpn, domain = _system_of(raw_system)
    if gpus < 1:
        raise ScenarioError(f"--gpus {gpus}: expected at least 1 GPU")
    if gpus <= gpn:
        return dict(sysd, num_nodes=1, gpus_per_node=gpus)
    if gpus % gpn:
        raise ScenarioError(f"--gpus {gpus}: not a whole number of {gpn}-GPU nodes")
    out = dict(sysd, num_nodes=gpus // gpn)
    if isinstance(domain, int) and isinstance(gpn, int) and domain > gpn and gpus > domain and gpus % domain:
        out["nvlink_domain"] = max(k for k in range(gpn, domain + 1, gpn) if gpus % k == 0)
    return out


def _system_of(raw_system) -> tuple[dict, int, int | None]:
    """(the system section as a dict, its GPUs per node, its NVLink domain), the preset's where the
    section does not say."""
    from pipesim.presets.systems import SYSTEMS
    from pipesim.scenario.load import resolve_preset
    from pipesim.scenario.schema import Loader
    sysd = {"preset": raw_system} if isinstance(raw_system, str) else dict(raw_system)
    # a built-in preset or a preset file (sweep.read_base made its path absolute), with the section's
    # own keys over it: a file on a 4-GPU-tray system must not be sized as 8-GPU nodes
    full = resolve_preset(sysd, SYSTEMS, "system", Loader("search")) if isinstance(sysd.get("preset"), str) else sysd
    return sysd, full.get("gpus_per_node") or 8, full.get("nvlink_domain")


def nvlink_domain_note(raw_system, gpus: int) -> str:
    """A line for the user when system_for shrank the NVLink domain, else ''."""
    _, gpn, before = _system_of(raw_system)
    after = system_for(raw_system, gpus).get("nvlink_domain", before)
    if before and after != before:
        return (f"system.nvlink_domain {before} does not divide {gpus} GPUs: NVLink domains of {after} "
                f"(racks with {after // gpn} trays in use); set system.nvlink_domain to choose")
    return ""


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def pipeline_sizes(layers: int) -> list[int]:
    """Pipeline sizes to try: the layer count's divisors (even stages) and the powers of two up to
    it (uneven ones, split as Megatron splits them: pipesim/scenario/stage_split.py). Models of
    2025-26 often have no power-of-two divisor (DeepSeek-V3 and Kimi K2: 61 layers, Qwen3-235B: 94)
    yet train with PP 8 or 16."""
    return sorted(set(divisors(layers)) | {2 ** k for k in range(1, layers.bit_length()) if 2 ** k <= layers})


def probe_scenario(base: dict, gpus: int):
    """The model and system of a search, loaded on a layout that always exists (pure data
    parallel, one sample per GPU; without the MoE overlaps, which need expert parallelism)."""
    from pipesim.scenario.load import load_scenario
    return load_scenario({**base, "parallel": {"tensor": 1, "pipeline": 1},
                          "training": dict(base["training"], global_batch_size=gpus, micro_batch_size=1,
                                           schedule="1f1b", moe_a2a_overlap=False,
                                           moe_shared_expert_overlap=False)})


def set_key(d: dict, dotted: str, value) -> dict:
    """A copy of scenario dict `d` with `section.key` set (sections copied, not shared)."""
    section, key = dotted.split(".", 1)
    return {**d, section: dict(d.get(section) or {}, **{key: value})}


# The FP8 / FP4 recipe's own choices (each refused without precision: fp8): a candidate the
# precision axis (--precisions) makes 16-bit drops them instead of being impossible.
FP8_ONLY = ("fp8_attention", "fp8_lm_head", "fp8_param_gather", "bf16_layers_start", "bf16_layers_end",
            "bf16_gemms", "mxfp8_gemms", "bf16_mtp")


def candidates(raw: dict, gpus: int, space: SearchSpace | None = None) -> list[dict]:
    """Scenario dicts for every combination worth loading (cheap arithmetic filters only; the
    loader gives the reason for anything else)."""
    space = space or SearchSpace()
    base = dict(raw)
    base["system"] = system_for(raw["system"], gpus)
    probe = probe_scenario(base, gpus)
    m, island = probe.model, probe.system.island
    # tensor parallelism inside one NVLink domain (a node, or an NVL72 rack's trays)
    tensors = space.tensor or tuple(t for t in (1, 2, 4, 8, 16) if t <= island and gpus % t == 0)
    pipes = space.pipeline or tuple(p for p in pipeline_sizes(m.num_layers) if gpus % p == 0)
    contexts = space.context or tuple(2 ** k for k in range(0, 11) if 2 ** k == 1 or (
        m.causal and m.seq_length % (2 ** (k + 1)) == 0 and m.seq_length // 2 ** k >= MIN_CP_TOKENS))
    axes = {"parallel.context": contexts, **space.extra}
    sp_given = "sequence_parallel" in (raw.get("parallel") or {})
    extra_keys = list(axes)
    out, seen = [], set()
    modes = axes.get(CP_MODE, ())
    for extra in itertools.product(*(axes[k] for k in extra_keys)):
        settings = dict(zip(extra_keys, extra))
        if modes and settings["parallel.context"] == 1 and settings[CP_MODE] != modes[0]:
            continue          # without CP the mode changes nothing: one candidate
        split = math.prod(v for k, v in settings.items() if k in GPU_AXES)
        for t, p in itertools.product(tensors, pipes):
            if gpus % (t * p * split):
                continue
            d = gpus // (t * p * split)
            scheds = [("1f1b", 1)] if p == 1 else []
            if p > 1:
                for name in space.schedules:
                    if name == "interleaved":
                        scheds += [(name, v) for v in VIRTUAL if p * v <= m.num_layers]
                    elif name in ("zb-v", "dualpipe-v"):
                        if 2 * p <= m.num_layers:
                            scheds.append((name, 2))
                    else:
                        scheds.append((name, 1))
            zeros = space.zero if d > 1 else (0,)
            if base["training"].get("optimizer") == "muon":     # Muon runs with ZeRO 0-2 only
                zeros = tuple(z for z in zeros if z != 3)
            comps = space.compression if p > 1 else (16,)
            for mb, (sched, v), rc, z, bits in itertools.product(space.micro_batch, scheds, space.recompute, zeros,
                                                                 comps):
                M = base["training"]["global_batch_size"] // (mb * d) if mb * d else 0
                if sched == "interleaved" and v > 1 and M % p:
                    continue      # micro-batches enter in rounds of P per chunk (schedules CONSTRAINTS)
                par = dict(base.get("parallel") or {}, tensor=t, pipeline=p, data=d, virtual_stages=v)
                par.pop("layers_per_stage", None)
                if m.num_layers % (p * v):     # uneven chunks, as Megatron splits them
                    par["layers_per_stage"] = embedding_loss_split(m.num_layers, p * v)
                if not sp_given:          # Megatron runs TP with sequence parallelism (MoE requires it)
                    par["sequence_parallel"] = t > 1
                tr = dict(base["training"], micro_batch_size=mb, schedule=sched, recompute=rc, zero_stage=z,
                          activation_compression_bits=bits)
                if z != 3:                # the base's ZeRO-3 / FSDP choices do not apply to other stages
                    for key in ("reshard_after_forward", "zero3_collectives"):
                        tr.pop(key, None)
                if rc != "selective":     # nor its selective submodules to other recompute policies
                    tr.pop("recompute_modules", None)
                cand = {**base, "parallel": par, "training": tr}
                values = dict(settings)
                if OFFLOAD in values:       # more layers than a chunk holds offload them all: one candidate
                    values[OFFLOAD] = min(values[OFFLOAD], -(-m.num_layers // (p * v)))
                    key = (t, p, d, mb, sched, v, rc, z, bits, tuple(values.items()))
                    if key in seen:
                        continue
                    seen.add(key)
                for key, value in values.items():
                    cand = set_key(cand, key, value)
                if cand["training"].get("precision") != "fp8":     # a 16-bit candidate of an FP8 base
                    cand = {**cand, "training": {k: v for k, v in cand["training"].items() if k not in FP8_ONLY}}
                out.append(cand)
    return out


# How far the closed form's throughput is from the simulator's, per schedule: the (lowest, highest)
# of simulated / closed-form - 1 over the layouts of the GPT-3 175B / 1024-GPU grid that fit the
# GPU memory in simulation (`python benchmarks/sweep_speed.py --band` measures it), rounded outward
# to 0.1 %. The closed form is optimistic for the zero-bubble schedules (their W placement leaves
# gaps it does not see). Schedules not measured get DEFAULT_BAND.
ERROR_BAND = {"1f1b": (-0.005, 0.000), "interleaved": (-0.003, 0.005), "zb-h1": (-0.135, 0.001),
              "zb-v": (-0.227, 0.001)}
DEFAULT_BAND = (-0.25, 0.25)


def keep_for_simulation(fits: list[dict], k: int) -> tuple[list[dict], list[dict]]:
    """(top k by closed-form throughput, the others that may still belong in the true top k).

    With the band, a layout's simulated throughput lies in [x (1 + lo), x (1 + hi)] for closed
    form x. At least k layouts reach the k-th largest lower end, so a layout whose upper end is
    below it cannot be in the top k: everything else is kept."""
    if not fits:
        return [], []
    band = lambda r: ERROR_BAND.get(r.get("schedule"), DEFAULT_BAND)
    order = sorted(fits, key=lambda r: -r["throughput_samples_per_s"])
    top = order[:k]
    lows = sorted((r["throughput_samples_per_s"] * (1 + band(r)[0]) for r in order), reverse=True)
    floor = lows[min(k, len(lows)) - 1]
    rest = [r for r in order[k:] if r["throughput_samples_per_s"] * (1 + band(r)[1]) >= floor]
    return top, rest


def search(raw: dict, gpus: int, space: SearchSpace | None = None, finalists: int = 16,
           evaluator: Callable = simulate_report, screen: Callable = analytic_report, jobs: int = 1,
           progress=None, use_ray: bool = False, ray_address: str | None = None) -> SearchResult:
    """Enumerate, screen every candidate by the closed form, simulate the top `finalists` plus
    everything the closed form's measured error band cannot rule out, rank by the simulator.
    `result.stages` counts what each stage kept."""
    from pipesim.scenario.load import load_scenario
    cands = candidates(raw, gpus, space)
    result = SearchResult(gpus=gpus, considered=len(cands))
    items = [Prepared(i, {}, raw=c) for i, c in enumerate(cands)]
    run = dict(jobs=jobs, use_ray=use_ray, ray_address=ray_address)
    screened = evaluate_all(items, evaluator=screen, **run)
    # The closed form's peak is verified for the SCREENED_SCHEDULES; for the others (ZB-V, ...) only
    # on a few layouts (evaluate.py), so near misses stay candidates and the simulator decides.
    memory = probe_scenario(dict(raw, system=system_for(raw["system"], gpus)), gpus).system.gpu.memory
    fits = [r for r in screened if r["status"] == "ok" or (
        r["status"] == "oom" and r.get("schedule") not in SCREENED_SCHEDULES
        and r.get("peak_memory_bytes", math.inf) <= UNVERIFIED_MARGIN * memory)]
    result.screened_oom = sum(r["status"] == "oom" for r in screened) - sum(r["status"] == "oom" for r in fits)
    for r in screened:
        if r["status"] in ("pruned", "error"):
            result.pruned[r["reason"]] = result.pruned.get(r["reason"], 0) + 1
    top, band = keep_for_simulation(fits, finalists)
    chosen = top + band
    result.simulated = len(chosen)
    result.stages = {"enumerated": len(cands), "loadable": sum(r["status"] in ("ok", "oom") for r in screened),
                     "fit memory (closed form)": len(fits), "top-k (closed form)": len(top),
                     "within the error band": len(band), "simulated": len(chosen)}
    def simulate_rows(batch: list[dict]) -> list[dict]:
        sim_items = [Prepared(k, {}, scenario=load_scenario(cands[r["index"]])) for k, r in enumerate(batch)]
        out = []
        for k, row in enumerate(evaluate_all(sim_items, evaluator=evaluator, progress=progress, **run)):
            src = batch[k]
            row = dict(row, screen={key: src.get(key) for key in (*COMPONENTS, *INSIDE_COMPUTE, "recompute_s",
                                                                  "tp_comm_s", "step_time_s", "peak_memory_bytes")})
            row["scenario"] = sim_items[k].scenario
            out.append(row)
        return out

    rows = simulate_rows(chosen)
    # None fits in simulation (the closed form under-counts some schedules' memory): the next best
    # by the closed form, `finalists` at a time, a few rounds at most
    done = {r["index"] for r in chosen}
    rest = sorted((r for r in fits if r["index"] not in done), key=lambda r: -r["throughput_samples_per_s"])
    for _ in range(EXTRA_ROUNDS):
        if any(r["status"] == "ok" for r in rows) or not rest:
            break
        batch, rest = rest[:finalists], rest[finalists:]
        rows += simulate_rows(batch)
        result.simulated += len(batch)
        result.stages["simulated again (none fit)"] = result.stages.get("simulated again (none fit)", 0) + len(batch)
    ok = prefer_simple(sorted([r for r in rows if r["status"] == "ok"], key=lambda r: -r["throughput_samples_per_s"]))
    result.finalists = ok
    result.stages["fit memory (simulated)"] = len(ok)
    if ok:
        result.best = ok[0]
        # The runner-up is the best finalist with a different layout (tensor, pipeline, schedule,
        # virtual stages or micro-batch): a change of a memory knob alone is not an alternative.
        core = lambda r: (r["tensor"], r["context"], r.get("context_mode"), r["pipeline"], r["schedule"],
                          r["virtual_stages"], r["micro_batch_size"])
        others = [r for r in ok[1:] if core(r) != core(ok[0])]
        if others:       # the best other layout, its own ties resolved toward the simpler setting
            result.runner_up = prefer_simple([r for r in others if core(r) == core(others[0])])[0]
        else:
            result.runner_up = ok[1] if len(ok) > 1 else None
        result.explanation = explain(result, fits, screened)
    return result


TIE = 0.005      # throughputs within 0.5 % are a tie: below the model's resolution
# The keys that tell two candidates' layouts apart (pipesim/whatif/evaluate.py layout_columns).
LAYOUT_KEYS = ("tensor", "context", "context_mode", "expert", "pipeline", "micro_batch_size", "schedule",
               "virtual_stages", "recompute", "zero_stage", "compression_bits", "offload_layers", "precision")
UNVERIFIED_MARGIN = 1.30
EXTRA_ROUNDS = 4       # more batches of finalists to simulate when none of the first fits


def complexity(r: dict) -> tuple:
    """Simpler first: full-precision sends, lower ZeRO stage, less recomputation, fewer offloaded
    layers, fewer chunks."""
    return (r["compression_bits"] < 16, r["zero_stage"], RECOMPUTE.index(r["recompute"]), r.get("offload_layers", 0),
            r["virtual_stages"])


def prefer_simple(rows: list[dict]) -> list[dict]:
    """Rows sorted best first; those tied with the best (within TIE) are reordered simplest first."""
    if not rows:
        return rows
    top = rows[0]["throughput_samples_per_s"]
    tied = [r for r in rows if r["throughput_samples_per_s"] >= top * (1 - TIE)]
    rest = rows[len(tied):]
    return sorted(tied, key=complexity) + rest


def describe(r: dict) -> str:
    sched = r["schedule"] + (f" v={r['virtual_stages']}" if r["virtual_stages"] > 1 else "")
    cp = f" x context {r['context']} ({r.get('context_mode', 'ring')})" if r.get("context", 1) > 1 else ""
    off = f", {r['offload_layers']} layers' activations offloaded" if r.get("offload_layers") else ""
    ep = f" (expert {r['expert']})" if r.get("expert", 1) > 1 else ""
    ep += f", ranks {r['rank_order']}" if r.get("rank_order", "tp-dp-pp") != "tp-dp-pp" else ""
    prec = f"{r['precision']}, " if r.get("precision") else ""
    return (f"tensor {r['tensor']}{cp} x pipeline {r['pipeline']} x data {r['data']}{ep}, micro-batch "
            f"{r['micro_batch_size']} (M={r['num_microbatches']}), {prec}{sched}, recompute {r['recompute']}, "
            f"ZeRO-{r['zero_stage']}, {r['compression_bits']}-bit sends{off}")


# The scenario keys a candidate sets (candidates() and the axes of SearchSpace.extra).
REPRODUCE_KEYS = ("system.num_nodes", "system.gpus_per_node", "system.nvlink_domain", "parallel.rank_order",
                  "parallel.tensor",
                  "parallel.context", "parallel.context_mode", "parallel.pipeline", "parallel.data",
                  "parallel.virtual_stages", "parallel.expert", "parallel.sequence_parallel",
                  "parallel.layers_per_stage", "training.micro_batch_size", "training.schedule",
                  "training.recompute", "training.zero_stage", "training.activation_compression_bits",
                  "training.offload_activation_layers", "training.precision", "training.zero_replicas")


def reproduce_args(s, raw: dict) -> list[str]:
    """`--set` arguments that turn the base scenario `raw` into the layout `s`: the keys whose value
    differs from what the base file gives (its own value, else its system preset's, else the
    field's default); an uneven split as `auto` when it is Megatron's."""
    from pipesim.scenario.load import scenario_to_dict
    have = scenario_to_dict(s)
    out = []
    for key in REPRODUCE_KEYS + tuple(f"training.{k}" for k in FP8_ONLY):
        section, name = key.split(".", 1)
        value = (have.get(section) or {}).get(name)
        if name == "layers_per_stage" and value is not None:
            lps = list(value)
            auto = embedding_loss_split(s.model.num_layers, s.parallel.pipeline * s.parallel.virtual_stages)
            value = "auto" if lps == auto else "[" + ",".join(map(str, lps)) + "]"
        given = given_value(raw, section, name)
        if isinstance(value, (list, tuple)) and isinstance(given, (list, tuple)):   # a file's list, a field's tuple
            value, given = list(value), list(given)
        if value is None or value == given:
            continue
        out.append(f"--set {key}={str(value).lower() if isinstance(value, bool) else value}")
    return out


def given_value(raw: dict, section: str, name: str):
    """What the base scenario says of section.name: its own value, its system preset's, or the
    field's default."""
    import dataclasses
    from pipesim.presets.systems import SYSTEMS
    from pipesim.scenario.config import ParallelConfig, TrainingConfig
    sec = raw.get(section)
    sec = {"preset": sec} if isinstance(sec, str) else (sec or {})
    if name in sec:
        return sec[name]
    if section == "system":
        preset = SYSTEMS.get(sec.get("preset")) if isinstance(sec.get("preset"), str) else None
        return (preset or {}).get(name)
    cls = {"parallel": ParallelConfig, "training": TrainingConfig}[section]
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    return None if f is None or f.default is dataclasses.MISSING else f.default


def explain(result: SearchResult, fits: list[dict], screened: list[dict]) -> list[str]:
    best, other = result.best, result.runner_up
    lines = [f"winner: {describe(best)}",
             f"  {best['throughput_samples_per_s']:.2f} samples/s, step {best['step_time_s']:.3f} s, "
             f"{best.get('model_tflops_per_gpu', 0):.1f} TFLOP/s per GPU, peak "
             f"{best['peak_memory_bytes'] / GiB:.1f} GiB of {best['scenario'].system.gpu.memory / GiB:.0f} GiB"
             + (f" ({TIGHT_TEXT})" if memory_tight(best["peak_memory_bytes"], best["scenario"].system.gpu.memory)
                else "")]
    sb = best["screen"]
    parts = ", ".join(f"{COMPONENTS[k]} {sb[k]:.3f} s" for k in COMPONENTS if sb.get(k))
    lines.append(f"  step breakdown (screening model): {parts}")
    if sb.get("recompute_s"):
        lines.append(f"  (compute includes {sb['recompute_s']:.3f} s of recomputation and "
                     f"{sb.get('tp_comm_s', 0):.3f} s of tensor-parallel communication)")
    if sb.get("cp_comm_exposed_s"):
        lines.append(f"  (compute includes {sb['cp_comm_exposed_s']:.3f} s of context-parallel K/V exchange "
                     "not hidden behind attention)")
    # Why the memory knobs are where they are: the same layout with a simpler setting did not fit.
    knobs = (("recompute", "recompute", lambda v: RECOMPUTE.index(v)), ("zero_stage", "ZeRO-", lambda v: v))
    for key, label, order in knobs:
        rest = [k for k in LAYOUT_KEYS if k != key]
        simpler = [r for r in screened if r.get("status") == "oom" and all(r.get(k) == best.get(k) for k in rest)
                   and order(r[key]) < order(best[key])]
        for r in sorted(simpler, key=lambda r: order(r[key])):
            sep = "" if label.endswith("-") else " "
            lines.append(f"  {label}{sep}{best[key]} because {label}{sep}{r[key]} needs "
                         f"{r['peak_memory_bytes'] / GiB:.1f} GiB by the screening model (out of memory)")
    if best is not result.finalists[0] or len([r for r in result.finalists if r["throughput_samples_per_s"]
                                               >= result.finalists[0]["throughput_samples_per_s"] * (1 - TIE)]) > 1:
        lines.append(f"  (finalists within {TIE:.1%} of the best throughput are a tie; the simplest is chosen)")
    if other is None:
        lines.append("  no runner-up: only one candidate survived")
        return lines
    gap = 100 * (1 - other["throughput_samples_per_s"] / best["throughput_samples_per_s"])
    lines.append(f"runner-up: {describe(other)}")
    lines.append(f"  {other['throughput_samples_per_s']:.2f} samples/s ({gap:.1f} % less throughput), step "
                 f"{other['step_time_s']:.3f} s, peak {other['peak_memory_bytes'] / GiB:.1f} GiB")
    so = other["screen"]
    names = {**COMPONENTS, **INSIDE_COMPUTE}
    deltas = sorted(((so.get(k, 0) or 0) - (sb.get(k, 0) or 0), k) for k in names)
    losses = [f"{names[k]} +{d:.3f} s" for d, k in reversed(deltas) if d > 1e-6][:3]
    gains = [f"{names[k]} {d:.3f} s" for d, k in deltas if d < -1e-6][:2]
    if losses:
        lines.append("  loses on: " + ", ".join(losses) + (f" (gains: {', '.join(gains)})" if gains else ""))
    diff = [name for name, a, b in (("tensor", best["tensor"], other["tensor"]),
                                    ("context", best["context"], other["context"]),
                                    ("context mode", best.get("context_mode"), other.get("context_mode")),
                                    ("expert", best.get("expert", 1), other.get("expert", 1)),
                                    ("precision", best.get("precision"), other.get("precision")),
                                    ("pipeline", best["pipeline"], other["pipeline"]),
                                    ("micro-batch", best["micro_batch_size"], other["micro_batch_size"]),
                                    ("schedule", best["schedule"], other["schedule"]),
                                    ("virtual stages", best["virtual_stages"], other["virtual_stages"]),
                                    ("recompute", best["recompute"], other["recompute"]),
                                    ("ZeRO stage", best["zero_stage"], other["zero_stage"]),
                                    ("compression", best["compression_bits"], other["compression_bits"])) if a != b]
    if diff:
        lines.append("  differs from the winner in: " + ", ".join(diff))
    return lines
