"""The per-step work after a stage's last backward (gradient all-reduces, clipping, the optimizer
step, FP8 weight re-casts) and the element sizes of weights and gradients it works on."""
from __future__ import annotations

from pipesim.costs.collectives import collective_time, p2p_time
from pipesim.costs.fp8 import fp8_storage_cast_bytes, weight_cast_bytes
from pipesim.costs.layers import shapes_of
from pipesim.costs.muon import MuonParts
from pipesim.costs.optimizer import grad_norm_bytes
from pipesim.costs.roofline import CostModel
from pipesim.costs.topology import placement, stage_link
from pipesim.scenario.config import Scenario


def norm_all_reduce(s: Scenario) -> float:
    """The gradient norm's scalar all-reduce over the tensor, pipeline and data groups (the same
    for every stage of a scenario: memoised per scenario object)."""
    hit = _NORM_AR.get(id(s))
    if hit is not None and hit[0] is s:
        return hit[1]
    par = s.parallel
    sec = sum(collective_time("all_reduce", 4.0, placement(s, g), par.collective) for g in ("tp", "pp", "dp_cp"))
    if len(_NORM_AR) > 64:
        _NORM_AR.clear()
    _NORM_AR[id(s)] = (s, sec)
    return sec


_NORM_AR: dict = {}


def step_fixed_ops(s: Scenario, cm: CostModel, stage: int, params: float, local_params: float,
                   fp8_params: float, elem: int, opt_step: float, muon_parts: MuonParts,
                   mx_params: float = 0.0) -> tuple:
    """The per-step work after the last backward of a stage, in the order Megatron-LM runs it
    (megatron/core/optimizer: finalize_model_grads, then clip_grad_norm, then step):
      EMBED_GRAD_AR   tied input/output embedding: first and last pipeline stage all-reduce the
                      embedding gradient (Shoeybi et al. 2019 Sec. 3; Narayanan et al. SC'21 Sec. 4)
      GRAD_NORM       gradient clipping: a multi-tensor L2 norm over the local gradients (memory
                      bound) and a scalar all-reduce over the tensor, pipeline and data groups
      OPTIMIZER       Adam over the local (ZeRO-sharded) parameters, memory bound (Muon: its
                      elementwise passes)
      MUON_TP_AG      Muon, duplicated over the tensor group: the momentum all-gathers of the
                      rank's matrices before their orthogonalisation
      NEWTON_SCHULZ   Muon: the orthogonalisation GEMMs of the rank's matrices (pipesim/costs/muon.py)
      FP8_WEIGHT_CAST the FP8 weight copies re-cast after the update (precision fp8); under
                      fp8_param_gather the fp32 master shard cast to FP8 plus the transpose rebuild"""
    tr, par = s.training, s.parallel
    out = []
    last = s.num_model_stages - 1
    # MTP on the last stage uses a copy of the input embedding, all-reduced the same way
    # (Megatron-Core finalize_model_grads._get_shared_word_embedding_weight: tied or mtp_num_layers)
    # (a frozen embedding under LoRA has no gradient to share)
    if (s.model.tied_embeddings or s.model.mtp_layers) and par.pipeline > 1 and stage in (0, last) \
            and not tr.lora_rank:
        sh = shapes_of(s)
        emb = sh.v * sh.h / sh.tp.weight_div * elem
        # an all-reduce of 2 members is one exchange of the buffer each way: α + B β
        out.append(("EMBED_GRAD_AR", p2p_time(emb, stage_link(s, 0, par.pipeline - 1))))
    if tr.optimizer in ("adam", "muon"):
        grads = grad_norm_bytes(local_params)
        out.append(("GRAD_NORM", cm.memory_time(grads) + norm_all_reduce(s)))
    out += [("MUON_TP_AG", muon_parts.gather), ("NEWTON_SCHULZ", muon_parts.ns), ("OPTIMIZER", opt_step)]
    curve = s.system.gpu.kernel_curve
    if fp8_params and tr.fp8_param_gather and tr.lora_rank:
        pass        # frozen FP8 weights (LoRA over an FP8-stored base) never change: nothing to re-cast
    elif fp8_params and tr.fp8_param_gather:      # the master shard cast to FP8 (pipesim/costs/fp8.py)
        local = fp8_params * local_params / params       # sharded as the stage's parameters are
        out.append(("FP8_WEIGHT_CAST", cm.memory_time(fp8_storage_cast_bytes(fp8_params, local, tr.fp8_recipe, curve))))
    elif fp8_params:    # every rank casts its whole (tensor-sharded) weights, ZeRO-1 or not (MXFP8 ones as such)
        cast = weight_cast_bytes(fp8_params - mx_params, tr.fp8_recipe, curve) + weight_cast_bytes(mx_params, "mxfp8", curve)
        out.append(("FP8_WEIGHT_CAST", cm.memory_time(cast)))
    return tuple((name, sec) for name, sec in out if sec > 0)
