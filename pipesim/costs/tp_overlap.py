"""Tensor-parallel communication overlapped with the GEMMs as Transformer Engine's Userbuffers runs
it (training.overlap_tp_comm under tp_overlap userbuffers; TE transformer_engine/pytorch/module/
base.py initialize_ub and common/comm_gemm_overlap/comm_gemm_overlap.cpp, 1.8 to 2.x). A layer's
four linears run each tensor-parallel GEMM by its method (scenario/tp_overlap_config.py UB_METHODS):

* ring_exchange (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad: the all-gather a GEMM consumes): the
  GEMM in tp chunks of M/tp rows (tp/2 of twice that with `aggregate`), the rank's own chunk first
  while the copy engines pass the others around the ring (use_ce: no SMs taken), each chunk on one
  of TE's GEMM streams as soon as its rows are in (_NUM_MAX_UB_STREAMS = 3: up to three at once).
  A two-stage flow shop whose first chunk needs no transfer: max(G, c + G / chunks).
* pipeline (proj_fprop, fc2_fprop: the reduce-scatter of a forward GEMM's output): the GEMM in
  num_splits chunks along M; each chunk's reduce-scatter, a Userbuffers kernel on num_sm SMs, runs
  beside the next chunk's GEMM: g + (n - 1) max(g', c / n) + c / n, g' a chunk beside the kernel.
* bulk (qkv_dgrad / fc1_dgrad beside the re-gather of their input, qkv_wgrad / fc1_wgrad beside the
  reduce-scatter of the input gradient; costs/stage.py exposed_tp_backward pairs them): the whole
  GEMM beside a kernel on num_sm SMs, max(G', c).
A GEMM beside such a kernel: with set_sm_margin its SM count target leaves the kernel its SMs
(_math_sms = SMs - num_sm - NVTE_EXT_MARGIN_SM), so it runs on fewer; without, its persistent grid
meets the kernel (moe_interference.gemm_slowdown: a CTA without an SM starts when one frees), for
at most the kernel's run.
TE's defaults (get_default_config): num_sm 16, num_splits 4, no aggregate, set_sm_margin on for the
pipeline and bulk methods since TE 2.0 (`"set_sm_margin": not method == "ring_exchange"`, commit
544dd14b4, February 2025), off before (TE 1.x add_ub: set_sm_margin=0).
What TP costs is the block's time less the GEMM's alone, which the op's compute time already is.
Other ops with tensor-parallel collectives (the LM head, MLA's projections, shared experts, Mamba's
projections) are not Userbuffers GEMMs in Megatron-Core: they keep stage.exposed_tp's model.
"""
from __future__ import annotations

from pipesim.costs.moe_interference import curve_gemm_slowdown
from pipesim.costs.ops import Op, is_wgrad
from pipesim.scenario.config import BYTES_PER_ELEMENT
from pipesim.scenario.tp_overlap_config import UB_METHODS

TE_DEFAULTS = {"num_sm": 16, "set_sm_margin": True, "num_splits": 4, "aggregate": False}
# Userbuffers' registered buffers: one per overlapped GEMM - the ten of UB_METHODS and TE 2.x's two
# "external" weight gradients (proj_wgrad, fc2_wgrad) - each of Megatron-Core's shape
# [seq x micro-batch / CP, hidden] (_initialize_tp_communicators -> initialize_ub, add_ub:
# CommOverlap / CommOverlapP2P(shape, buffer_dtype, ...)); 1-byte elements for the all-gather
# buffers under FP8 (`fp8_buf`: the six in UB_FP8_BUFFERS), the model's 16-bit otherwise.
UB_BUFFERS = 12
UB_FP8_BUFFERS = 6
UB_STREAMS = 3
# a layer's linears -> their (forward, input-gradient, weight-gradient) Userbuffers GEMMs
UB_GEMMS = {"qkv": ("qkv_fprop", "qkv_dgrad", "qkv_wgrad"), "fc1": ("fc1_fprop", "fc1_dgrad", "fc1_wgrad"),
            "proj": ("proj_fprop", "proj_dgrad", None), "fc2": ("fc2_fprop", "fc2_dgrad", None)}


def uses_userbuffers(s) -> bool:
    """Whether the TP overlap is timed as Transformer Engine's (training.tp_overlap userbuffers)."""
    return s.training.overlap_tp_comm and s.training.tp_overlap == "userbuffers"


def userbuffers_bytes(s) -> float:
    """Device memory Transformer Engine's Userbuffers hold for the whole run, when the TP overlap is
    TE's: --tp-comm-overlap on a Megatron / NeMo stack (overlap_tp_comm with sequence parallelism,
    not a PyTorch-native one, kernel_fusion eager, whose async TP has its own workspace)."""
    par, tr = s.parallel, s.training
    if not (tr.overlap_tp_comm and par.tensor > 1 and par.sequence_parallel and par.tensor_mode == "1d"
            and tr.kernel_fusion != "eager"):
        return 0.0
    elements = s.model.seq_length * tr.micro_batch_size / par.context * s.model.hidden_size
    one_byte = UB_FP8_BUFFERS if tr.precision == "fp8" else 0
    return elements * (one_byte + (UB_BUFFERS - one_byte) * BYTES_PER_ELEMENT[tr.precision])


def setting(tr, name: str, key: str):
    """A GEMM's Userbuffers setting: its own entry in training.tp_overlap_cfg, else `all`'s, else TE's."""
    for entry in (name, "all"):
        value = getattr(tr.tp_overlap_cfg.get(entry), key, None)
        if value is not None:
            return value
    return TE_DEFAULTS[key]


def forward_block(cm, tr, tp: int, op: Op, comm: float) -> float | None:
    """Exposed TP seconds of a Userbuffers linear's forward beside `comm` seconds of its collective;
    None for an op that is not one (the caller's model applies)."""
    names = UB_GEMMS.get(op.name)
    if names is None or cm.curve is None or len(op.gemms_fwd) != 1 or len(op.comm_fwd) != 1:
        return None
    g, name, kind = op.gemms_fwd[0], names[0], op.comm_fwd[0].kind
    if UB_METHODS[name] == "ring_exchange" and kind == "all_gather":
        block = _ring_exchange(cm, tr, name, g, comm, tp)
    elif UB_METHODS[name] == "pipeline" and kind == "reduce_scatter":
        block = _pipeline(cm, tr, name, g, comm)
    else:
        return None
    return max(0.0, block - cm.gemm_time(*g))


def row_backward_block(cm, tr, tp: int, op: Op, comm: float) -> float | None:
    """Exposed TP seconds of a row-parallel Userbuffers linear's backward: its output gradient's
    all-gather ring-exchanged into the input-gradient GEMM (the weight gradient reads the gathered
    rows after it). None where the op is not one."""
    names = UB_GEMMS.get(op.name)
    dgrad = _dgrad(op)
    if (names is None or names[2] is not None or cm.curve is None or dgrad is None
            or [c.kind for c in op.comm_bwd] != ["all_gather"]):
        return None
    return max(0.0, _ring_exchange(cm, tr, names[1], dgrad, comm, tp) - cm.gemm_time(*dgrad))


def column_backward_block(cm, tr, op: Op, regather: float, scatter: float) -> tuple[float, float] | None:
    """(exposed in B, exposed in I) of a column-parallel Userbuffers linear's backward: the input's
    re-gather (`regather` seconds) beside the input-gradient GEMM, the input gradient's
    reduce-scatter (`scatter` seconds) beside the weight-gradient GEMM; a lone I keeps the latter
    whole. None where the op is not one."""
    names = UB_GEMMS.get(op.name)
    dgrad = _dgrad(op)
    wgrad = next(filter(is_wgrad, op.gemms_bwd), None)
    if names is None or names[2] is None or cm.curve is None or dgrad is None or wgrad is None:
        return None
    d = max(0.0, _bulk(cm, tr, names[1], dgrad, regather) - cm.gemm_time(*dgrad))
    w = max(0.0, _bulk(cm, tr, names[2], wgrad, scatter) - cm.gemm_time(*wgrad))
    return d + w, d + scatter


def _dgrad(op: Op):
    return next((g for g in op.gemms_bwd if not is_wgrad(g)), None)


def _chunked(cm, g, chunks: int, sms_less: int = 0) -> float:
    """GEMM g = (batch, M, N, K, dtype[, role]) cut into `chunks` along M, up to UB_STREAMS at once."""
    batch, m, n, k, dtype, *role = g
    at_once = min(UB_STREAMS, chunks)
    return chunks / at_once * cm.gemm_time(batch * at_once, m / chunks, n, k, dtype, *role, sms_less=sms_less)


def _margin(tr, name: str) -> int:
    """SMs GEMM `name` leaves to its communication kernel: num_sm with set_sm_margin, else none."""
    return setting(tr, name, "num_sm") if setting(tr, name, "set_sm_margin") else 0


def _beside(cm, tr, name: str, g, chunks: int, comm: float) -> float:
    """Seconds of GEMM g in `chunks` chunks beside `comm` seconds of the GEMM's communication kernel
    (one on every SM the GEMM may use leaves it none: the two one after the other)."""
    held = setting(tr, name, "num_sm")
    if held + cm.gemm_sm_margin >= cm.curve["sms"]:
        return _chunked(cm, g, chunks) + comm
    if _margin(tr, name):
        return _chunked(cm, g, chunks, held)
    alone = _chunked(cm, g, chunks)
    batch, m, n, *_ = g
    slow = curve_gemm_slowdown(cm, m / chunks, n, batch * min(UB_STREAMS, chunks), held)
    return min(alone * slow, alone + comm)


def _ring_exchange(cm, tr, name: str, g, comm: float, tp: int) -> float:
    chunks = tp // 2 if setting(tr, name, "aggregate") and tp % 2 == 0 and tp > 2 else tp
    gemm = _chunked(cm, g, chunks)
    return max(gemm, comm + gemm / chunks)


def _pipeline(cm, tr, name: str, g, comm: float) -> float:
    n = setting(tr, name, "num_splits")
    margin = _margin(tr, name)
    first = _chunked(cm, g, n, margin if margin + cm.gemm_sm_margin < cm.curve["sms"] else 0) / n
    beside = _beside(cm, tr, name, g, n, comm) / n
    return first + (n - 1) * max(beside, comm / n) + comm / n


def _bulk(cm, tr, name: str, g, comm: float) -> float:
    return max(_beside(cm, tr, name, g, 1, comm), comm)
