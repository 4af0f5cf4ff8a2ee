"""Mixture-of-experts layers as ops, their all-to-all, and routing imbalance.

An MoE block (Shazeer et al. 2017; Lepikhin et al. 2021 "GShard", Sec. 2.2; Megatron-Core MoE with
the alltoall token dispatcher) per micro-batch on one GPU:
  router      gating GEMM [tokens x h] @ [h x E] + softmax/sigmoid + top-k
  permute     copy each token once per chosen expert into expert order (memory bound)
  dispatch    all-to-all over the EP group (+ all-gather over ETP)     -- a2a_costs()
  experts     grouped GEMMs fc1 / activation / fc2 of the local experts, each with its own tokens
  combine     all-to-all back (+ reduce-scatter over ETP)               -- a2a_costs()
  unpermute   sum the k copies of each token (memory bound); the router probabilities are
              applied in the experts' activation (Megatron-Core >= 0.13)
  shared      always-active shared experts: a dense tensor-parallel MLP (DeepSeek-V3)
LatentMoE (`model.moe_latent_size` d, Nemotron 3 Super; Megatron-Core moe_layer.py): a duplicated
(not tensor-split) projection h -> d of the local tokens before the permute and d -> h after the
unpermute; the permute, all-to-all, experts (d -> ffn -> d) and unpermute run at width d; the router
and the shared experts see the full h.
Shapes: a GPU holds T_loc = b·s / t tokens (sequence parallel); the EP·ETP ranks of a stage route
EP·ETP·T_loc·k token copies to E experts, so a local expert's GEMM has M = λ·EP·ETP·T_loc·k / E rows
(λ: load of the busiest EP rank over the mean, `load_factor`) and N = moe_ffn / ETP columns.
The grouped GEMM is one op with one profile lookup per local expert (M x h x N each); on the GEMM
curve it runs as Transformer Engine does, in rounds of 4 concurrent per-expert GEMMs
(expert_gemm_rounds), so the small-M expert GEMMs cost their own wave quantisation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist

from pipesim.costs.collectives import Link, collective_time
from pipesim.costs.layers import Shapes, high_precision, matmul, vector
from pipesim.costs.moe_dispatch import FUSED_DISPATCHERS, kernel_rate
from pipesim.costs.moe_host import host_exposed_fwd
from pipesim.costs.moe_interference import comm_sms, overlap_slowdown
from pipesim.costs.moe_parallel import expert_placement
from pipesim.costs.norm_kernels import waiting_norms
from pipesim.costs.ops import Op
from pipesim.scenario.config import Scenario

FP32 = 4


def local_tokens(s: Scenario, sh: Shapes) -> float:
    """Tokens a GPU routes per micro-batch: sequence parallelism shards them over the tensor group."""
    return sh.tokens / sh.tp.token_div


def load_factor(s: Scenario, sh: Shapes | None = None) -> float:
    """λ = expected load of the busiest EP rank / mean load (1 = balanced).

    dropless — stated model: expert e is picked with popularity w_e (mean 1, coefficient of
    variation c = training.moe_routing_skew, independent per micro-batch) and, given w, its count
    is Poisson(N w_e / E) for N routed token copies (multinomial routing, Poisson limit). An EP rank
    holds E/EP experts; by the law of total variance its load has mean μ = N/EP and
    CV² = 1/μ + c²·EP/E. The expected maximum of EP such loads is μ(1 + z·CV) with z the expected
    maximum of EP standard normals, Blom's approximation z = Φ⁻¹((EP − 0.375)/(EP + 0.25))
    (Blom 1958, "Statistical Estimates and Transformed Beta-Variables", Ch. 6).
    Default c = 0.25: DeepSeek's Loss-Free Balancing paper (Wang et al. 2024, arXiv 2408.15664,
    Table 1) reports MaxVio = max load / mean − 1 ≈ 0.72 for an auxiliary-loss-balanced 64-expert
    model; a max over 64 experts of 1 + c·z(64) = 1.72 gives c = 0.72 / 2.34 ≈ 0.3; 0.25 is the
    conservative rounding (see docs/MOE.md; not fitted to any validation case; the 0.72 is quoted
    from memory of the paper and should be re-checked against it).
    capacity — each expert keeps at most moe_capacity_factor × its mean load, so a rank's load is
    at most that factor: λ = min(λ_dropless, moe_capacity_factor) (GShard Sec. 2.2 capacity).
    """
    m, tr, par = s.model, s.training, s.parallel
    if tr.moe_routing == "balanced" or not m.is_moe:
        return 1.0
    if sh is None:
        from pipesim.costs.layers import shapes_of
        sh = shapes_of(s)
    ep = par.expert
    copies = local_tokens(s, sh) * m.moe_top_k * ep          # N routed copies in one EP group
    mu = copies / ep
    cv = math.sqrt(1.0 / mu + tr.moe_routing_skew ** 2 * ep / m.num_experts)
    z = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25)) if ep > 1 else 0.0
    lam = 1.0 + z * cv
    if tr.moe_routing == "capacity":
        return min(lam, tr.moe_capacity_factor)
    return lam


def expert_rows(s: Scenario, sh: Shapes) -> float:
    """Token rows a GPU feeds its local experts per micro-batch (busiest EP rank)."""
    m, par = s.model, s.parallel
    return load_factor(s, sh) * local_tokens(s, sh) * m.moe_top_k * par.expert_tensor


def received_tokens(s: Scenario, sh: Shapes) -> float:
    """Distinct tokens the busiest EP rank receives per micro-batch from a dispatcher that sends
    each token once per destination rank (DeepEP): every rank's T_loc tokens reach a given rank
    with probability parts_hit(ep) / ep, times the load factor and the ETP copies as expert_rows."""
    m, par = s.model, s.parallel
    return load_factor(s, sh) * local_tokens(s, sh) * parts_hit(m, par.expert) * par.expert_tensor


def routed_width(s: Scenario, sh: Shapes) -> int:
    """Width of a routed token: the latent size under LatentMoE, else the hidden size."""
    return s.model.moe_latent_size or sh.h


def latent_projection(name: str, T_loc: float, k: int, n: int, e: int, dtype: str, saved_input: float) -> Op:
    """One of LatentMoE's projections (Megatron-Core fc1_latent_proj / fc2_latent_proj: TELinear
    with parallel_mode "duplicated", no bias): [T_loc x k] @ [k x n], the full weight on every
    tensor rank. Under FP8 it keeps its input's FP8 copy, as a Linear does (layers.matmul)."""
    flops = 2 * T_loc * k * n
    a, w, c = T_loc * k * e, k * n * e, T_loc * n * e
    return Op(name, "matmul", flops, 2 * flops, a + w + c, c + 2 * a + 2 * w,
              saved_bytes=saved_input / e if dtype == "fp8" else saved_input, params=k * n, dgrad_fraction=0.5,
              param_tensors=1, measure_fwd=(("gemm", dict(m=int(T_loc), k=k, n=n, dtype=dtype)),),
              gemms_fwd=((1, T_loc, n, k, dtype),),
              gemms_bwd=((1, T_loc, k, n, dtype), (1, k, n, T_loc, dtype, "wgrad")),
              matrices=((1, n, k, 1, 1),))


def moe_block_ops(s: Scenario, sh: Shapes) -> list[Op]:
    """The MoE block of one layer (the part after the second norm), per micro-batch per GPU."""
    m, par, dtype = s.model, s.parallel, s.training.precision
    e, E, k = sh.e, m.num_experts, m.moe_top_k
    d = routed_width(s, sh)
    T_loc = local_tokens(s, sh)
    local_experts = E // par.expert
    et = par.expert_tensor
    rows = expert_rows(s, sh)
    gated = m.activation == "swiglu"
    f_loc = m.moe_ffn / et
    ops: list[Op] = []
    # Router: a replicated [h x E] gating GEMM on the local tokens; scores kept in fp32 for the
    # softmax/sigmoid + top-k (Megatron-Core --moe-router-dtype fp32).
    rdt = high_precision(dtype)                 # the router stays in 16/32-bit under FP8
    ops.append(Op("router", "matmul", 2 * T_loc * sh.h * E, 4 * T_loc * sh.h * E,
                  (T_loc * sh.h + sh.h * E) * e + T_loc * E * FP32, (2 * T_loc * sh.h + 2 * sh.h * E) * e,
                  saved_bytes=T_loc * sh.h * e, params=sh.h * E + (E if m.bias else 0), dgrad_fraction=0.5,
                  param_tensors=1, measure_fwd=(("gemm", dict(m=int(T_loc), k=sh.h, n=E, dtype=rdt)),),
                  gemms_fwd=((1, T_loc, E, sh.h, rdt),),
                  gemms_bwd=((1, T_loc, sh.h, E, rdt), (1, sh.h, E, T_loc, rdt, "wgrad")),
                  matrices=((1, E, sh.h, 1, 1),)))
    ops.append(Op("router_topk", "vector", 8 * T_loc * E, 4 * T_loc * E, 2 * T_loc * E * FP32,
                  3 * T_loc * E * FP32, saved_bytes=T_loc * k * (FP32 + 8)))
    if m.moe_latent_size:
        # its BF16 input is the router's saved input (the normed hidden states): held once
        ops.append(latent_projection("moe_latent_down", T_loc, sh.h, d, e, dtype,
                                     T_loc * sh.h * e if dtype == "fp8" else 0.0))
    # permute (local, T_loc·k copies) and the post-dispatch sort by local expert (rows copies):
    # read + write each copy once; backward is the inverse gather. DeepEP sends the tokens
    # themselves and returns the distinct ones a rank received (`recv`), which one permute
    # expands to the rows (Megatron-Core MoEFlexTokenDispatcher.get_permuted_hidden_states_by_experts).
    deepep = s.training.moe_dispatcher in FUSED_DISPATCHERS
    moved = ((0.0 if deepep else T_loc * k) + rows) * d * e
    ops.append(Op("permute", "vector", 0.0, 0.0, 2 * moved, 2 * moved))
    fc1_n = m.moe_ffn * (2 if gated else 1)
    ops.append(grouped_gemm("expert_fc1", rows, d, fc1_n / et, local_experts, e, dtype, m.bias,
                            saved_input=rows * d * e, split=(et, 1)))
    act = rows * f_loc
    # Megatron-Core multiplies each copy by its router probability inside the activation
    # (experts.py activation_func_with_probs; fused: weighted_bias_swiglu, which keeps its input and
    # the probabilities), "Memory efficient token permutation", !2668, core_v0.13.0
    ops.append(vector("expert_act", act, sh, (8, 12), reads=2 if gated else 1,
                      saved_bytes=act * e * (2 if gated else 1) + rows * FP32))
    ops.append(grouped_gemm("expert_fc2", rows, f_loc, d, local_experts, e, dtype, m.bias,
                            saved_input=act * e, split=(1, et)))
    # unsort + unpermute: read the k weighted copies, write their sum per token (under DeepEP
    # per received token: the combine kernel sums the ranks' partial outputs). Its backward
    # scatters the gradient back by the saved mapping, so it keeps no tokens (before !2668 the
    # probabilities were applied here and the k expert outputs were kept for their gradient).
    out = received_tokens(s, sh) if deepep else T_loc
    ops.append(Op("unpermute", "vector", 2 * T_loc * k * d, 2 * T_loc * k * d,
                  moved + out * d * e, moved + 2 * out * d * e))
    if m.moe_latent_size:
        ops.append(latent_projection("moe_latent_up", T_loc, d, sh.h, e, dtype, T_loc * d * e))
    if m.num_shared_experts:
        ops += shared_expert_ops(s, sh, m.num_shared_experts * m.moe_ffn)
    return ops


# Transformer Engine's grouped linear (Megatron-Core TEGroupedMLP, --moe-grouped-gemm) on Hopper runs
# one cuBLAS GEMM per expert, spread round-robin over its compute streams: 4 of them
# (NVIDIA/TransformerEngine, transformer_engine/common/util/multi_stream.cpp,
# get_num_compute_streams(); used by nvte_multi_stream_cublas_gemm).
TE_GEMM_STREAMS = 4


def expert_gemm_rounds(groups: int, m: float, n: float, k: float, dtype: str, *role: str) -> tuple:
    """The experts' GEMMs as the GPU runs them: rounds of up to TE_GEMM_STREAMS concurrent GEMMs,
    each round one batch on the GEMM curve (the concurrent GEMMs' tiles share the SMs' waves; the
    rounds follow each other). (batch, M, N, K, dtype[, role]) tuples (role: CostModel.gemm_time)."""
    full, rest = divmod(groups, TE_GEMM_STREAMS)
    rounds = ((TE_GEMM_STREAMS, m, n, k, dtype, *role),) * full
    return rounds + (((rest, m, n, k, dtype, *role),) if rest else ())


def grouped_gemm(name: str, rows: float, k: float, n: float, groups: int, e: int, dtype: str, bias: bool,
                 saved_input: float, split: tuple[int, int] = (1, 1)) -> Op:
    """`groups` experts, each [rows/groups x k] @ [k x n] (a grouped GEMM, Megatron-Core
    --moe-grouped-gemm); 2mnk forward, 4mnk backward FLOPs (Kaplan et al. 2020, Sec. 2.1).
    `split`: how expert tensor parallelism divides each expert's (out, in) features."""
    flops = 2 * rows * k * n
    a, w, c = rows * k * e, groups * k * n * e, rows * n * e
    b = groups * n * e if bias else 0.0
    per = dict(m=int(rows / groups), k=int(k), n=int(n), dtype=dtype)
    m_e = rows / groups
    if dtype == "fp8":
        # as a dense FP8 Linear (layers.matmul): Transformer Engine's GroupedLinear keeps the
        # inputs' column-wise FP8 copies for the weight gradients, 1 byte per element
        # (module/grouped_linear.py, _GroupedLinear.forward: update_usage(rowwise_usage=False,
        # columnwise_usage=True) before save_for_backward, TE 2.x)
        saved_input = saved_input / e
    return Op(name, "matmul", flops, 2 * flops, a + w + b + c, c + 2 * a + 2 * (w + b),
              saved_bytes=saved_input, params=groups * (k * n + (n if bias else 0)), dgrad_fraction=0.5,
              param_tensors=2 if bias else 1,      # one grouped weight (and bias) tensor
              # the GEMM curve (pipesim/costs/gemm.py) times the per-expert GEMMs in TE's rounds,
              # (batch, M, N, K): forward Y = X W, input grad dX = dY W^T, weight grad dW = X^T dY
              gemms_fwd=expert_gemm_rounds(groups, m_e, n, k, dtype),
              gemms_bwd=expert_gemm_rounds(groups, m_e, k, n, dtype) + expert_gemm_rounds(groups, k, n, m_e, dtype, "wgrad"),
              measure_fwd=(("gemm", per),) * groups,
              measure_bwd=(("gemm", dict(m=per["m"], k=per["n"], n=per["k"], dtype=dtype)),
                           ("gemm", dict(m=per["k"], k=per["m"], n=per["n"], dtype=dtype))) * groups,
              matrices=((groups, n * split[0], k * split[1], *split),))   # one matrix per expert (TE GroupedLinear)


def shared_expert_ops(s: Scenario, sh: Shapes, f: int) -> list[Op]:
    """Shared experts: one dense tensor-parallel MLP of width f (Megatron-Core shared_experts)."""
    m, dtype = s.model, s.training.precision
    e, tp, T = sh.e, sh.tp, sh.tokens
    tok = T / tp.token_div
    gated = m.activation == "swiglu"
    act = T * f / tp.size
    return [matmul("shared_fc1", T, sh.h, f * (2 if gated else 1), sh, "column", saved_input=tok * sh.h * e,
                   dtype=dtype, bias=m.bias),
            vector("shared_act", act, sh, (8, 12), reads=2 if gated else 1, saved_bytes=act * e * (2 if gated else 1)),
            matmul("shared_fc2", T, f, sh.h, sh, "row", saved_input=act * e, dtype=dtype, bias=m.bias)]


@dataclass(frozen=True)
class A2ACost:
    """Token-exchange time of one MoE layer per micro-batch on one GPU (dispatch + combine)."""
    fwd: float            # seconds: dispatch + combine in the forward
    bwd: float            # seconds: their gradients in the backward (same volumes, reversed)
    bytes_fwd: float      # bytes a GPU sends in the forward (both all-to-alls, all links)
    bytes_bwd: float
    intra_bytes: float    # of one all-to-all: bytes over NVLink
    inter_bytes: float    # ... over the inter-node (inter-island) network


def a2a_costs(s: Scenario, sh: Shapes) -> A2ACost:
    """α-β cost of dispatch and combine over the EP group's placement on NVLink islands.

    A GPU sends X = T_loc·k·d·e bytes (d: the routed width, h or the LatentMoE size; one copy per
    chosen expert), 1/EP of it to itself; with
    `per` of the EP group's members on its island and EP − per elsewhere, routing spreads the
    copies evenly (uniform top-k), so (per − 1)/EP·X crosses NVLink and (EP − per)/EP·X the
    inter-node network. Both links run at once: t = max(intra/B_intra, inter/B_inter)·λ + latency,
    with λ the busiest rank's receive excess (load_factor).
    alltoall — NCCL all-to-all (pairwise exchange; Thakur, Rabenseifner & Gropp 2005 Sec. 4.5):
      EP − 1 messages, each paying α of the slowest link used.
    deepep — a DeepEP-like fused dispatcher (deepseek-ai/DeepEP README, "normal kernels"; DeepSeek-V3
      arXiv 2412.19437 Sec. 3.2.2): a token is sent once per distinct destination rank, not once
      per expert (DeepEP's get_dispatch_layout -> num_tokens_per_rank / is_token_in_rank; the rank
      expands it to its local experts after the dispatch, and the combine returns one partial sum
      per rank: Megatron-Core fused_a2a.py, MoEFlexTokenDispatcher). It crosses the inter-node
      network once per distinct remote island and is forwarded over NVLink there; one fused kernel,
      α per link. With E experts in n equal parts (ranks or islands), the expected distinct parts
      a token's k experts hit (uniform top-k without replacement, `parts_hit`): n·(1 − C(E − E/n,
      k)/C(E, k)); the remote ones (n − 1)/n of them. Every distinct rank's copy crosses NVLink
      unless it is the GPU where the token lands (its own, or the same-index GPU of a remote
      island): (per − 1)/per of them. Group-limited routing (DeepSeek-V3's node-limited routing,
      Sec. 2.1.2: `moe_router_num_groups` G, at most g = `moe_router_group_topk` per token) whose
      groups are whole parts or unions of them draws the k from the g·E/G experts of the chosen
      groups, which span g·n/G parts; other groupings keep the uniform expectation.
    hybridep — NVIDIA's HybridEP kernels (Megatron-Core flex dispatcher, backend hybridep): deepep's
      traffic; on Blackwell its SMs, not NVLink, set the rate (costs/moe_dispatch.py kernel_rate,
      the published GB200 table), so each phase takes max(wire, received bytes / kernel rate). So do
      DeepEP's kernels when the EP group lies in one Blackwell NVLink domain (NVIDIA's GB200 NVL72
      measurement); across domains its internode kernels stay link-bound (no figure).
    ETP > 1 adds an all-gather (dispatch) / reduce-scatter (combine) of the received tokens over
    the ETP group (Megatron-Core alltoall dispatcher with expert tensor parallelism).
    """
    m, par, tr = s.model, s.parallel, s.training
    ep, et = par.expert, par.expert_tensor
    T_loc = local_tokens(s, sh)
    d = routed_width(s, sh)
    X = T_loc * m.moe_top_k * d * sh.e
    lam = load_factor(s, sh)
    etp_s = 0.0
    if et > 1:
        etp = expert_placement(s, "etp")
        etp_s = collective_time("all_gather", lam * X * et, etp)
    if ep <= 1:
        return A2ACost(2 * etp_s, 2 * etp_s, 0.0, 0.0, 0.0, 0.0)
    g = expert_placement(s, "ep")
    per, islands = g.per_node, max(1, math.ceil(ep / g.per_node))
    intra_link, inter_link = g.intra, g.inter
    recv = 0.0              # bytes a rank receives through a fused dispatcher's kernels, its own included
    if tr.moe_dispatcher in FUSED_DISPATCHERS:
        recv = T_loc * d * sh.e * parts_hit(m, ep)
        inter = T_loc * d * sh.e * parts_hit(m, islands) * (islands - 1) / islands
        intra = recv * (per - 1) / per
        alpha = intra_link.latency + (inter_link.latency if inter > 0 else 0.0)
    else:
        intra = X * (per - 1) / ep
        inter = X * (ep - per) / ep
        slow: Link = inter_link if inter > 0 else intra_link
        alpha = (ep - 1) * slow.latency
    wire = max(intra / intra_link.bandwidth, inter / inter_link.bandwidth if inter else 0.0)
    # the fused kernels' own SMs may not keep up with the link (costs/moe_dispatch.py): each phase
    # takes the longer of the wire and the bytes the rank receives at the kernel's rate
    dispatch, combine = (alpha + lam * max(wire, recv / rate if rate else 0.0) + etp_s
                         for rate in (kernel_rate(s, per, phase, sh.e, one_domain=islands == 1)
                                      for phase in ("dispatch", "combine")))
    sent = 2 * (intra + inter)
    # The alltoall dispatcher first exchanges the copies per expert (Megatron-Core
    # MoEAlltoAllTokenDispatcher preprocess: an all-to-all of E/EP counts per peer), a
    # latency-bound all-to-all in the forward; DeepEP's fused kernel computes its layout inside.
    counts = (ep - 1) * (inter_link.latency if islands > 1 else intra_link.latency) \
        if tr.moe_dispatcher == "alltoall" else 0.0
    cal = measured_a2a(s)
    if cal is not None and tr.moe_dispatcher == "alltoall":
        # a CPU profile: the all-to-all as the emulator's ranks timed it (gloo's all_to_all_single
        # over this EP group, latency + bytes to the other ranks / bandwidth; moe_calibration.py),
        # plus the wake-up of the ranks that wait asleep for the last one (measured the same way)
        wake = cal.get("wakeup_s", 0.0)
        dispatch = combine = cal["latency_s"] + wake + lam * X * (ep - 1) / ep / cal["bandwidth_Bps"] + etp_s
        counts = cal["counts_s"] + wake
    return A2ACost(dispatch + combine + counts, dispatch + combine, sent, sent, intra, inter)


def parts_hit(m, parts: int) -> float:
    """Expected distinct parts (EP ranks or islands, E/parts experts each) among a token's k
    experts (a2a_costs docstring)."""
    E, k = m.num_experts, m.moe_top_k
    per_part, spanned, pool = E // parts, parts, E
    G, g = m.moe_router_num_groups, m.moe_router_group_topk
    if G and g and parts % G == 0:        # each group is parts/G whole parts
        spanned, pool = g * parts // G, g * E // G
    return spanned * (1 - _comb(pool - per_part, k) / _comb(pool, k))


def measured_a2a(s: Scenario) -> dict | None:
    """The all-to-all the MoE emulator's ranks measured, from a CPU profile's host model
    (pipesim/emulator/moe_calibration.py), else None."""
    if s.costs.profile is None:
        return None
    from pipesim.calibrate.host import host_of
    from pipesim.costs.stage import load_profile_for
    host = host_of(load_profile_for(s))
    return host.get("a2a") if host else None


def _comb(n: int, k: int) -> float:
    return float(math.comb(n, k)) if 0 <= k <= n else 0.0


def expert_params(ops: list[Op]) -> float:
    """Parameters of `ops` (one layer, per GPU) that live in the routed experts (sharded by EP·ETP,
    replicated over expert-data parallelism)."""
    return sum(o.params for o in ops if o.name.startswith("expert_"))


@dataclass(frozen=True)
class MoELayerCosts:
    """What one MoE layer adds per micro-batch on one GPU (stage_costs multiplies by its count)."""
    ops: list
    saved: float              # activation bytes kept after the recompute policy
    recompute: float          # seconds re-run in the backward
    working: float            # transient bytes of a recomputed layer
    a2a: A2ACost
    expert_params: float      # routed-expert parameters per GPU
    grad_ratio: float         # expert-gradient bytes -> equivalent data-parallel bytes
    gather_ratio: float       # expert-weight all-gather bytes (ZeRO) -> equivalent data-parallel bytes
    block_fwd: float = 0.0    # compute seconds of the MoE block (router .. shared experts), forward
    block_bwd: float = 0.0    # ... backward
    host_fwd: float = 0.0     # host seconds the forward exposes after the dispatcher's count sync
    block_wgrad: float = 0.0  # of block_bwd: the weight gradients (Megatron runs them after the
                              # dispatch backward is launched, a2a_overlap.py)
    slow_fwd: tuple = (1.0, 1.0)   # (attention, MoE block) forward time beside the all-to-all's
    slow_bwd: tuple = (1.0, 1.0)   # kernels / alone; ... backward (moe_interference.py)

    @classmethod
    def build(cls, s: Scenario, cm, sh: Shapes, layer_recompute) -> "MoELayerCosts":
        from pipesim.costs.stage import costed_layer_ops
        ops = costed_layer_ops(s, moe=True)
        rc_time, saved, working = layer_recompute(s, cm, ops)
        a2a = a2a_costs(s, sh)
        host = host_exposed_fwd(s, cm, ops, a2a.fwd)
        tr = s.training
        if tr.moe_shared_expert_overlap:
            a2a = shared_expert_overlap(s, cm, ops, a2a)
        if tr.recompute == "full" or (tr.recompute == "selective" and "moe" in tr.recompute_modules):
            rc_time += a2a.fwd + host           # the recomputed forward dispatches (and syncs) again
        split = [o.name for o in ops].index("router")
        block = ops[split:]
        slow = {ph: (overlap_slowdown(s, cm, ops[:split], ph), overlap_slowdown(s, cm, block, ph)) for ph in ("fwd", "bwd")}
        # the attention part holds the layer's norms: cooperative ones wait for the transfer when
        # it holds more SMs than their margin (costs/norm_kernels.py), so it stops beside it
        for ph, waits in zip(("fwd", "bwd"), waiting_norms(s, comm_sms(s))):
            if waits:
                slow[ph] = (math.inf, slow[ph][1])
        return cls(ops, saved, rc_time, working, a2a, expert_params(ops), grad_ratio(s, ops),
                   gather_ratio(s, ops),
                   sum(cm.time(o, "fwd").seconds for o in block) + host,
                   sum(cm.time(o, "bwd").seconds for o in block), host,
                   sum(cm.time(o, "bwd").seconds * cm.wgrad_share(o) for o in block), slow["fwd"], slow["bwd"])


def shared_expert_overlap(s: Scenario, cm, ops: list[Op], a2a: A2ACost) -> A2ACost:
    """The all-to-all time the shared experts hide when they run on a second stream beside the
    layer's own dispatch and combine (training.moe_shared_expert_overlap): Megatron-Core's
    SharedExpertMLP runs fc1 beside the dispatch and fc2 beside the combine on its own CUDA stream
    (moe_shared_expert_overlap, shared_experts.py); NeMo AutoModel's MoE runs the whole shared MLP
    on a side stream beside the routed path (nemo_automodel/components/moe/layers.py). Autograd
    runs each backward op on its forward op's stream, so the backward overlaps the same way.
    Shared work of x seconds runs beside a transfer of t seconds at 1/slow of its rate (the SMs the
    dispatcher's kernels hold, moe_interference.py): the layer shortens by min(x, t/slow), taken
    off the exposed all-to-all; bytes unchanged."""
    shared = [o for o in ops if o.name.startswith("shared_")]
    cut = {}
    for phase, t in (("fwd", a2a.fwd), ("bwd", a2a.bwd)):
        x = sum(cm.time(o, phase).seconds for o in shared)
        cut[phase] = min(x, t / overlap_slowdown(s, cm, shared, phase))
    return replace(a2a, fwd=a2a.fwd - cut["fwd"], bwd=a2a.bwd - cut["bwd"])


def edp_ratio(s: Scenario, kind: str, algorithm: str | None = None, nbytes: float | None = None) -> float:
    """Expert weights and gradients are gathered / reduced over the expert-data-parallel group
    (EDP = t·d / (EP·ETP)), dense ones over data parallelism. The engine runs one stream of
    such collectives over the DP group, so expert bytes enter it scaled by t_EDP / t_DP of one
    collective of `nbytes` (default: one gradient bucket; same α-β formulas and algorithm as the
    engine uses for that collective): exact for collectives of that size, since the latency
    terms differ between the two groups; 0 when EDP is 1 (nothing to exchange)."""
    from pipesim.costs.topology import placement
    from pipesim.costs.moe_parallel import expert_data_size
    if expert_data_size(s) <= 1:
        return 0.0
    from pipesim.costs.zero_groups import zero_collective_time
    bucket = s.training.grad_bucket_MB * 1e6 if nbytes is None else nbytes
    algorithm, replicas = algorithm or s.parallel.collective, s.training.zero_replicas
    dense = zero_collective_time(kind, bucket, placement(s, "dp_cp"), replicas, algorithm)   # the engine's DP group
    if dense <= 0:
        return 1.0
    return zero_collective_time(kind, bucket, expert_placement(s, "edp"), replicas, algorithm) / dense


def gather_ratio(s: Scenario, ops: list[Op]) -> float:
    """edp_ratio of the ZeRO weight all-gathers: rings (engine.py); under ZeRO-1/2 at the size of
    the parameter bucket they run in (zero3_reuse.param_allgather_seconds), under ZeRO-3 at one
    gather's of the layer `ops`: the layer's weights with FSDP (one gather per wrapped layer), one
    parameter tensor's with DeepSpeed (zero3_reuse.weight_gathers)."""
    from pipesim.costs.memory import elem_of
    from pipesim.costs.zero3_reuse import param_bucket_bytes
    tr = s.training
    if tr.zero_stage < 3:
        return edp_ratio(s, "all_gather", "ring", param_bucket_bytes(tr))
    layer = sum(o.params for o in ops) * elem_of(tr)
    gathers = 1 if tr.zero3_per_layer else max(1, sum(o.param_tensors for o in ops))
    return edp_ratio(s, "all_gather", "ring", layer / gathers if layer > 0 else None)


def grad_ratio(s: Scenario, ops: list[Op]) -> float:
    """edp_ratio of the gradient reductions, at their size: a gradient bucket, or the layer `ops`'
    gradients where FSDP reduces one wrapped layer per collective (zero3_reuse.gradient_buckets;
    at the bucket's size a per-layer reduction read 2x slower with a tenth of the link latencies,
    benchmarks/metamorphic_audit.py)."""
    from pipesim.costs.memory import grad_elem_bytes
    tr = s.training
    layer = sum(o.params for o in ops) * grad_elem_bytes(tr) if tr.zero3_per_layer else 0.0
    return edp_ratio(s, "reduce_scatter" if tr.zero_stage >= 1 else "all_reduce", nbytes=layer or None)
