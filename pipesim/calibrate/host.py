"""The host model of a CPU "system": what an emulator rank pays on a shared CPU besides the ops'
own arithmetic, measured inside the ranks under the emulator's process/thread layout and stored
in the cost profile (device.host), then used by the simulator for CPU profiles.

Terms (all measured, none fitted to a crosscheck result):
- layout: cores vs ranks x torch threads; more ranks than cores time-share the cores, so each
  rank computes at cores / (ranks x threads) of its speed (`heterogeneity.rank_speed`);
- dispatch: eager PyTorch's host time per op (Python module call, dispatcher, autograd node,
  the emulator's saved-tensor hooks), measured by running the scenario's own layer structure at
  a negligible size (h = 8 per head, s = 4) so that only host time remains; per layer divided by
  the launches the cost model counts, less one bare torch call (already inside every measured op
  time), gives `gpu.kernel_launch_us` (launch_overlaps false: a CPU runs ops synchronously);
- stage extras: the first and last stage's host time beyond their ops' launches (embedding,
  head and loss at negligible size), added to their F and B;
- action: the executor's own cost per plan action (status record, trace event, memory sample),
  from no-op actions run through the executor; added to each compute action;
- p2p: gloo send/recv between two ranks (one-way time of a ping-pong, the OSU osu_latency
  method) fitted to latency + bytes / bandwidth: the sender's copy into the socket, the wire
  (loopback) and the receiver's copy out, i.e. both sides' costs (`intra_node`);
- allreduce: gloo all-reduce over the run's ranks (the OSU osu_allreduce method), fitted the same
  way and used for the all-reduces of a group of that size inside F and B (tensor parallelism):
  gloo's all-reduce of 2 CPU processes took 0.6-3.6 ms for 4-884 KB where the point-to-point fit
  gives 0.2-0.7 ms (its chunked ring waits on the peer at every step), so the p2p link would
  predict it 3-5x short. An all-reduce of a size the in-model trace ran (the TP all-reduces of
  the stages, pipesim/emulator/rank_calibration.py) takes that trace's time instead: beside the
  compute, each all-reduce also waits for the partner that left its compute later, and the
  calibration's back-to-back all-reduces do not (shape tp2 L4 h192 of the suite: 0.5-1.0 ms from
  the fit, 1.5-1.7 ms per all-reduce in the steps).
- allgather: gloo all-gather over the run's ranks (torch.distributed.all_gather of one shard a
  rank and the concatenation, as the emulator's sequence-parallel gathers run it), fitted the same
  way, for the all-gathers of a group of that size. A reduce-scatter takes the all-reduce's time:
  gloo has none, and the emulator all-reduces and keeps its slice (emulator/layers.py
  TPGroup.reduce_scatter0). Without these, a TP 2 crosscheck with sequence parallelism charged its
  gathers and scatters on the point-to-point fit.
"""
from __future__ import annotations

import statistics
import time
from contextlib import nullcontext

TINY_DIM_PER_HEAD = 8
TINY_SEQ = 4
TINY_VOCAB = 32


def tiny_overrides(s, layers_per_stage: int) -> list[str]:
    """--set overrides giving the scenario's layer structure at negligible size on 2 stages."""
    m = s.model
    h = TINY_DIM_PER_HEAD * m.num_attention_heads
    out = [f"model.hidden_size={h}", f"model.seq_length={TINY_SEQ}", f"model.vocab_size={TINY_VOCAB}",
           f"model.num_layers={2 * layers_per_stage}", "training.micro_batch_size=1",
           "parallel.tensor=1", "parallel.data=1", "parallel.pipeline=2", "parallel.virtual_stages=1",
           "parallel.context=1",
           "parallel.sequence_parallel=false", "training.global_batch_size=2"]
    if m.ffn_hidden_size is not None:
        out.append(f"model.ffn_hidden_size={4 * h}")
    if m.hybrid_layer_pattern:     # the model's own mix of layer kinds, cycled to the tiny depth
        n = 2 * layers_per_stage
        pattern = (m.hybrid_layer_pattern * n)[:n]
        out += [f'model.hybrid_layer_pattern="{pattern}"', "model.mamba_head_dim=8", "model.mamba_state_dim=8",
                f"model.mamba_num_heads={2 * m.mamba_num_groups}"]
    return out


def measure_dispatch(s, reps: int = 40) -> dict:
    """Host seconds of the emulator's model at negligible size, in this process: per layer
    (forward, backward), and the extra of the first stage (embedding) and the last (head + loss).
    From 2-stage models of 1 and 3 layers per stage: per layer = difference / 2. The four
    variants are run in turn and timed in thread CPU time (noise from other processes would
    otherwise dominate a difference of small times); the median of `reps` rounds is kept."""
    import torch

    from pipesim.emulator import prepare
    from pipesim.emulator.layers import TPGroup, WeightGradStore
    from pipesim.emulator.memory import MemoryCounter
    from pipesim.emulator.model import build_stages
    from pipesim.emulator.optim import attach_grad_buffer, unique_params
    variants = {}
    for layers in (1, 3):
        tiny = prepare(s, tiny_overrides(s, layers))
        stages = build_stages(tiny, [0, 1], TPGroup(), WeightGradStore(), 0, torch.float32, False)[0]
        for m in stages.values():
            attach_grad_buffer(unique_params([m]))
        for k, m in stages.items():
            variants[(k, layers)] = (m, tiny.model.hidden_size)
    tokens = torch.randint(0, TINY_VOCAB, (1, TINY_SEQ + 1))
    counter = MemoryCounter()

    def setup(k, m, h):
        def prepared():
            x = tokens[:, :-1] if k == 0 else torch.randn(TINY_SEQ, 1, h, requires_grad=True)
            return lambda: m(x, tokens[:, 1:]) if k == 1 else m(x)
        return prepared
    return timed_variants({key: setup(key[0], m, h) for key, (m, h) in variants.items()}, reps, counter.hooks)


def timed_variants(variants: dict, reps: int, context=None) -> dict:
    """split_dispatch of the median thread-CPU forward and backward of each variant, keyed
    (stage, layers) with stage 1 the last (it returns a loss). `variants[key]()` prepares a round
    untimed and returns the forward to time; the variants run in turn, the first 2 rounds are
    warm-up. `context` (a context-manager factory) wraps each forward + backward."""
    import torch
    times: dict = {key: ([], []) for key in variants}
    clock = time.thread_time
    for i in range(reps + 2):
        for key, prepare_round in variants.items():
            forward = prepare_round()
            with context() if context else nullcontext():
                t0 = clock()
                y = forward()
                t1 = clock()
                y.backward() if key[0] == 1 else y.backward(torch.ones_like(y))
                t2 = clock()
            if i >= 2:
                times[key][0].append(t1 - t0)
                times[key][1].append(t2 - t1)
    return split_dispatch({key: (statistics.median(f), statistics.median(b)) for key, (f, b) in times.items()})


def bare_call_s(reps: int = 200) -> float:
    """Thread CPU seconds of one bare torch call at negligible size (median)."""
    import torch
    a, w = torch.randn(TINY_SEQ, 8), torch.randn(8, 8)
    bare = []
    for _ in range(reps):
        t0 = time.thread_time()
        torch.mm(a, w)
        bare.append(time.thread_time() - t0)
    return statistics.median(bare)


def split_dispatch(t: dict) -> dict:
    """The dispatch record from the (forward, backward) host seconds of 2-stage models of 1 and 3
    layers per stage, keyed (stage, layers): per layer = difference / 2 (averaged over both
    stages), the first stage's and the last's extra = their 1-layer time less one layer."""
    per_layer = [max(0.0, (t[(0, 3)][i] - t[(0, 1)][i] + t[(1, 3)][i] - t[(1, 1)][i]) / 4) for i in range(2)]
    first = [max(0.0, t[(0, 1)][i] - per_layer[i]) for i in range(2)]
    last = [max(0.0, t[(1, 1)][i] - per_layer[i]) for i in range(2)]
    return {"layer_fwd_s": per_layer[0], "layer_bwd_s": per_layer[1], "first_fwd_s": first[0],
            "first_bwd_s": first[1], "last_fwd_s": last[0], "last_bwd_s": last[1],
            "bare_call_s": bare_call_s()}


def launches_per_layer(s) -> int:
    """Launches the cost model charges per layer, forward + backward (roofline.with_launch: one
    per op forward, two backward for ops with weights); an MoE model's layers are MoE layers
    (the MoE emulator's are all MoE)."""
    from pipesim.costs.layers import layer_ops
    return _launches(layer_ops(s, moe=s.model.is_moe))


def _launches(ops) -> int:
    return len(ops) + sum(2 if o.dgrad_fraction < 1 else 1 for o in ops)


def stage_extras(s, dispatch: dict) -> dict:
    """Host seconds of the first stage (embedding) and of the last (head and loss) beyond what
    the cost model already charges their ops as launches: the measured extra of a 1-layer first
    or last stage over a layer (measure_dispatch), less the launches of embedding_ops / head_ops
    at the measured host time per op. It holds what no op stands for -- the stage's own call,
    autograd's start of a backward, the loss's scalar ops (tiny models lost 12-20 % of their
    forward to it, docs/EMULATOR.md)."""
    from pipesim.costs.layers import embedding_ops, head_ops
    per_op = (dispatch["layer_fwd_s"] + dispatch["layer_bwd_s"]) / launches_per_layer(s)
    out = {}
    for side, ops in (("first", embedding_ops(s)), ("last", head_ops(s))):
        fwd, total = len(ops), _launches(ops)
        out[f"{side}_fwd_s"] = max(0.0, dispatch.get(f"{side}_fwd_s", 0.0) - fwd * per_op)
        out[f"{side}_bwd_s"] = max(0.0, dispatch.get(f"{side}_bwd_s", 0.0) - (total - fwd) * per_op)
    return out


def fit_link(points) -> tuple[float, float] | None:
    """(latency s, bandwidth bytes/s) of t = latency + bytes / bandwidth (Hockney's alpha-beta
    model) over (bytes, seconds) points; None with fewer than 2 sizes.

    The slope is Theil-Sen's (median of the pairwise slopes; Sen 1968, JASA 63:1379) and the
    latency the median residual, so one size hit by a burst of load on a shared machine does not
    tip the fit (least squares gave a negative slope under load and the link went missing). When
    the byte term is below the timing noise (slope <= 0) the bandwidth is bounded by it: the
    median absolute deviation of the times spread over the byte range is the largest byte cost
    the noise could hide."""
    pts = sorted((float(b), float(t)) for b, t in points)
    if len({b for b, _ in pts}) < 2:
        return None
    slopes = [(t2 - t1) / (b2 - b1) for i, (b1, t1) in enumerate(pts) for b2, t2 in pts[i + 1:] if b2 > b1]
    slope = statistics.median(slopes)
    if slope <= 0:
        times = [t for _, t in pts]
        mid = statistics.median(times)
        spread = statistics.median(abs(t - mid) for t in times) or 1e-9 * mid or 1e-12
        slope = spread / (pts[-1][0] - pts[0][0])
    latency = statistics.median(t - slope * b for b, t in pts)
    return max(0.0, latency), 1.0 / slope


def host_model(s, dispatch: dict, action_s: float, p2p_points, layout: dict, allreduce_points=(),
               ranks: int = 2, in_model=None, allgather_points=(), tp_size: int = 2) -> dict:
    """The device.host record of a profile from what the ranks measured; `in_model`: {kind:
    [(bytes, seconds)]} of the TP collectives (groups of `tp_size`) the in-model traces ran."""
    # A measured op's time already holds one bare call (the calibration times torch.mm etc. from
    # Python); the launch term is the host time beyond it, so it is not counted twice.
    per_layer = dispatch["layer_fwd_s"] + dispatch["layer_bwd_s"]
    launch = max(0.0, per_layer / launches_per_layer(s) - dispatch.get("bare_call_s", 0.0))
    out = {"layout": layout, "dispatch": dispatch, "action_s": action_s, "kernel_launch_s": launch}
    if "first_fwd_s" in dispatch:
        out["stage_extra"] = stage_extras(s, dispatch)
    link = fit_link(p2p_points)
    if link is not None:
        out["p2p"] = {"latency_s": link[0], "bandwidth_Bps": link[1],
                      "points": [[b, t] for b, t in p2p_points]}
    fit = fit_link(allreduce_points)
    if fit is not None:
        out["allreduce"] = {"ranks": ranks, "latency_s": fit[0], "bandwidth_Bps": fit[1],
                            "points": [[b, t] for b, t in allreduce_points]}
    fit = fit_link(allgather_points)
    if fit is not None:
        out["allgather"] = {"ranks": ranks, "latency_s": fit[0], "bandwidth_Bps": fit[1],
                            "points": [[b, t] for b, t in allgather_points]}
    if in_model and any(in_model.values()):
        out["tp_in_model"] = {"ranks": tp_size, **{k: [[b, t] for b, t in v] for k, v in in_model.items() if v}}
    return out


# which measured fit times a collective of each kind on gloo (a reduce-scatter is the emulator's
# all-reduce and slice)
_FIT_OF_KIND = {"all_reduce": "allreduce", "reduce_scatter": "allreduce", "all_gather": "allgather"}


def host_collective_seconds(profile, kind: str, nbytes: float, ranks: int) -> float | None:
    """A measured collective of `nbytes` (the full buffer) over `ranks` processes (latency +
    bytes / bandwidth of the host model's fit for its kind), or None when the profile has no fit
    for that kind and a group of that size."""
    host = host_of(profile)
    if not host or nbytes <= 0:
        return None
    traced = host.get("tp_in_model", {})
    if traced.get("ranks") == ranks:             # the in-model traces' time at their sizes
        for b, sec in traced.get(kind, ()):
            if b == round(nbytes):
                return sec
    fit = host.get(_FIT_OF_KIND.get(kind, ""))
    if not fit or fit.get("ranks") != ranks:
        return None
    return fit["latency_s"] + nbytes / fit["bandwidth_Bps"]


def host_of(profile) -> dict | None:
    """The profile's host model, when it has one and was measured on a CPU."""
    if profile is None or profile.device.get("kind") != "cpu":
        return None
    return profile.device.get("host")


def stage_extra_seconds(profile, first: bool, last: bool) -> tuple[float, float]:
    """(forward, backward) host seconds a stage pays for holding the embedding / the head
    (stage_extras; 0 without a CPU host model)."""
    host = host_of(profile)
    ex = host.get("stage_extra", {}) if host else {}
    fwd = (ex.get("first_fwd_s", 0.0) if first else 0.0) + (ex.get("last_fwd_s", 0.0) if last else 0.0)
    bwd = (ex.get("first_bwd_s", 0.0) if first else 0.0) + (ex.get("last_bwd_s", 0.0) if last else 0.0)
    return fwd, bwd


def action_seconds(profile) -> float:
    """The executor's cost per compute action (0 without a CPU host model)."""
    host = host_of(profile)
    return float(host.get("action_s", 0.0)) if host else 0.0


def with_host_model(s):
    """The scenario with its system's host terms replaced by the profile's measured host model
    (CPU profiles only; other scenarios come back unchanged)."""
    if s.costs.profile is None:
        return s
    from pipesim.costs.profile import load_profile
    from pipesim.scenario.load import load_scenario, scenario_to_dict
    host = host_of(load_profile(s.costs.profile))
    if not host:
        return s
    d = scenario_to_dict(s)
    gpu = d["system"]["gpu"]
    gpu["kernel_launch_us"] = host["kernel_launch_s"] * 1e6
    gpu["launch_overlaps"] = False
    if "p2p" in host:
        link = {"bandwidth_GBps": host["p2p"]["bandwidth_Bps"] / 1e9,
                "latency_us": host["p2p"]["latency_s"] * 1e6, "efficiency": 1.0}
        d["system"]["intra_node"] = dict(link)
        d["system"]["inter_node"] = dict(link)
    lay = host.get("layout", {})
    share = lay.get("cores", 1) / max(1, lay.get("ranks", 1) * lay.get("threads_per_rank", 1))
    if share < 1.0:     # more runnable rank threads than cores: each rank gets its share
        d["system"]["heterogeneity"]["rank_speed"] = {r: share for r in range(s.num_gpus)}
    from dataclasses import replace
    return replace(load_scenario(d), source=s.source)

