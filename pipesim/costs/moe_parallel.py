"""Expert parallelism: the expert grid, where its groups sit, and the MoE scenario checks.

Megatron-Core folds the expert layers onto the same GPUs as the dense layers of a pipeline stage
(Megatron-Core MoE docs, "parallel folding"; Liu et al. 2025, "MoE Parallel Folding",
arXiv 2504.14960, Sec. 3): the tensor·data GPUs of a stage are re-split as
expert_tensor (ETP, innermost) · expert (EP) · expert-data (EDP, outermost). So
EDP = tensor·data / (EP·ETP), and EP groups are made of consecutive tensor-data indices (stride
ETP): with the default rank order (tensor, then data innermost) an EP group fills an NVLink
island before it leaves it.
"""
from __future__ import annotations

from pipesim.costs.collectives import GroupPlacement
from pipesim.costs.pods import a2a_factor, ring_factor
from pipesim.costs.topology import links, rank_of, scaled, strides
from pipesim.scenario.config import Scenario


def expert_data_size(s: Scenario) -> int:
    """EDP: replicas of each expert shard (its gradients are reduced over them). The expert grid
    folds onto a stage's tensor·context·data GPUs (Megatron-Core parallel_state: expert layers
    see world / pipeline = tp·cp·dp ranks as etp·ep·edp)."""
    par = s.parallel
    return max(1, par.tensor * par.context * par.data // (par.expert * par.expert_tensor))


def island_size(s: Scenario) -> int:
    """GPUs that share one NVLink fabric: the node, or `system.nvlink_domain` when the NVLink
    domain spans several trays (GB200/GB300 NVL72: 72)."""
    return s.system.island


def _stage_rank(s: Scenario, index: int, pp: int = 0) -> int:
    """Global rank of tensor-context-data index `index` (tensor innermost) in pipeline stage `pp`."""
    t, c = s.parallel.tensor, s.parallel.context
    return rank_of(s, tp=index % t, cp=(index // t) % c, dp=index // (t * c), pp=pp)


def group_ranks(s: Scenario, group: str, which: int = 0, pp: int = 0) -> list[int]:
    """Global ranks of expert group `group` ("ep", "etp" or "edp") number `which` (by its first
    member's index) in pipeline stage `pp`."""
    par = s.parallel
    et, ep, edp = par.expert_tensor, par.expert, expert_data_size(s)
    stride, size = {"etp": (1, et), "ep": (et, ep), "edp": (et * ep, edp)}[group]
    t, c = par.tensor, par.context
    st = strides(s)          # _stage_rank's arithmetic with the strides looked up once
    base = pp * st["pp"]
    out = []
    for k in range(size):
        index = which + k * stride
        out.append(base + (index % t) * st["tp"] + ((index // t) % c) * st["cp"] + (index // (t * c)) * st["dp"])
    return out


def expert_placement(s: Scenario, group: str) -> GroupPlacement:
    """The expert communicator `group` on NVLink islands: size and members per island."""
    ranks = group_ranks(s, group)
    isl = island_size(s)
    counts: dict[int, int] = {}
    for r in ranks:
        counts[r // isl] = counts.get(r // isl, 0) + 1
    intra, inter = links(s)
    per_island = max(counts.values())
    factor = a2a_factor(s, ranks, per_island) if group == "ep" else ring_factor(s, ranks)
    return GroupPlacement(size=len(ranks), per_node=per_island, intra=intra, inter=scaled(inter, factor))


def check_moe(s: Scenario, loader) -> None:
    """Cross-field checks of the MoE model and expert parallelism; each shows the arithmetic."""
    m, par = s.model, s.parallel
    ep, et, t, d = par.expert, par.expert_tensor, par.tensor, par.data * par.context
    if m.arch != "transformer":
        return
    if m.is_mla:
        for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if getattr(m, key) < 1:
                loader.fail(f"model.{key}", f"must be at least 1 for attention_variant: {m.attention_variant}, got {getattr(m, key)}")
        if m.q_lora_rank is not None and m.q_lora_rank < 1:
            loader.fail("model.q_lora_rank", f"must be at least 1 (or null), got {m.q_lora_rank}")
    if not m.is_moe:
        if m.num_experts < 0:
            loader.fail("model.num_experts", f"must be 0 (dense) or positive, got {m.num_experts}")
        if ep > 1 or et > 1:
            loader.fail("parallel.expert", f"expert({ep})·expert_tensor({et}) > 1 needs an MoE model "
                        "(model.num_experts > 0)")
        if s.training.moe_shared_expert_overlap:
            loader.fail("training.moe_shared_expert_overlap", "needs an MoE model with shared experts")
        return
    if m.moe_top_k < 1:
        loader.fail("model.moe_top_k", f"must be at least 1, got {m.moe_top_k}")
    if m.moe_top_k > m.num_experts:
        loader.fail("model.moe_top_k", f"moe_top_k({m.moe_top_k}) > num_experts({m.num_experts})")
    if m.num_shared_experts < 0:
        loader.fail("model.num_shared_experts", f"must not be negative, got {m.num_shared_experts}")
    if m.moe_latent_size is not None and not 1 <= m.moe_latent_size <= m.hidden_size:
        loader.fail("model.moe_latent_size", f"must be in [1, hidden_size({m.hidden_size})], got {m.moe_latent_size}")
    if m.moe_layer_freq < 1:
        loader.fail("model.moe_layer_freq", f"must be at least 1, got {m.moe_layer_freq}")
    if not 0 <= m.moe_first_dense_layers < m.num_layers:
        loader.fail("model.moe_first_dense_layers", f"moe_first_dense_layers({m.moe_first_dense_layers}) "
                    f"must be in [0, num_layers({m.num_layers}))")
    if m.num_experts % ep:
        loader.fail("parallel.expert", f"num_experts({m.num_experts}) % expert({ep}) = "
                    f"{m.num_experts % ep} ≠ 0")
    if (t * d) % (ep * et):
        loader.fail("parallel.expert", f"expert({ep})·expert_tensor({et}) = {ep * et} does not divide "
                    f"tensor({t})·{f'context({par.context})·' if par.context > 1 else ''}data({par.data}) = "
                    f"{t * d} (the expert grid folds onto a stage's tensor·context·data GPUs)")
    if m.moe_ffn % et:
        loader.fail("parallel.expert_tensor", f"moe_ffn_hidden_size({m.moe_ffn}) % expert_tensor({et}) = "
                    f"{m.moe_ffn % et} ≠ 0")
    if par.tensor_mode != "1d":
        loader.fail("parallel.tensor_mode", f"MoE layers are modelled with 1d tensor parallelism, "
                    f"not {par.tensor_mode}")
    if t > 1 and not par.sequence_parallel:
        loader.fail("parallel.sequence_parallel", f"MoE with tensor({t}) > 1 needs sequence_parallel: true "
                    "(Megatron-Core requires it for expert layers)")
    tr = s.training
    if tr.moe_a2a_overlap:
        check_a2a_overlap(s, loader)
    if tr.moe_shared_expert_overlap:
        check_shared_expert_overlap(s, loader)


def check_shared_expert_overlap(s: Scenario, loader) -> None:
    """training.moe_shared_expert_overlap where Megatron-Core runs it (TransformerConfig: not with
    --overlap-moe-expert-parallel-comm, not with the shared experts recomputed); without shared
    experts or expert parallelism there is nothing to overlap."""
    key, tr = "training.moe_shared_expert_overlap", s.training
    if not s.model.num_shared_experts:
        loader.fail(key, "needs shared experts (model.num_shared_experts > 0)")
    if s.parallel.expert <= 1:
        loader.fail(key, "needs expert parallelism (parallel.expert > 1): there is no all-to-all to overlap")
    if tr.moe_a2a_overlap:
        loader.fail(key, "cannot be combined with training.moe_a2a_overlap (Megatron-Core asserts one or the other)")
    if tr.recompute == "selective" and "shared_experts" in tr.recompute_modules:
        loader.fail(key, "cannot be combined with recompute_modules shared_experts (Megatron-Core: shared_experts "
                    "recompute cannot work with --moe-shared-expert-overlap)")


def check_a2a_overlap(s: Scenario, loader) -> None:
    """training.moe_a2a_overlap where Megatron-Core runs it: its TransformerConfig asserts expert
    parallelism, no full recomputation and, with pipeline parallelism, virtual stages (the
    combined 1F1B exists for no pipelining and for the interleaved schedule only:
    pipeline_parallel/schedules.py); DualPipeV pairs its own. Simulated anyway, the plain 1F1B
    pairing held every forward's send back and lengthened the step by half (qwen3-30b-a3b, 2 stages)."""
    par, tr = s.parallel, s.training
    if par.expert <= 1:
        loader.fail("training.moe_a2a_overlap", "needs expert parallelism (parallel.expert > 1): there is no "
                    "all-to-all to hide")
    if tr.recompute == "full":
        loader.fail("training.moe_a2a_overlap", "runs without full recomputation (Megatron-Core asserts "
                    "recompute_granularity != full); use recompute: selective")
    if par.pipeline > 1 and par.virtual_stages == 1:
        loader.fail("training.moe_a2a_overlap", f"with pipeline({par.pipeline}) > 1 needs an interleaved schedule "
                    f"(parallel.virtual_stages > 1) or dualpipe-v: Megatron-Core pairs micro-batches only "
                    f"there and asserts virtual stages for it")
    if tr.zero_stage == 3:
        loader.fail("training.moe_a2a_overlap", "all-to-all overlap is modelled without ZeRO-3 (zero_stage 3)")
