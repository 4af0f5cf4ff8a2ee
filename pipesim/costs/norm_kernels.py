"""Which of Transformer Engine's LayerNorm / RMSNorm kernels launch as cooperative kernels.

TE's normalization kernels (transformer_engine/common/normalization at NVIDIA/TransformerEngine
d0067d0, 2026-08) are persistent: their grid is sized to the SMs TE may use (the SM count less
NVTE_FWD/BWD_LAYERNORM_SM_MARGIN) times the CTAs one SM holds. A row of the hidden dimension is
split over `ctas_per_row` CTAs; when that is more than one, the CTAs of a row exchange partial
sums, and the kernel is started with cudaLaunchCooperativeKernel (ln_fwd_cuda_kernel.cu,
ln_bwd_semi_cuda_kernel.cu, rmsnorm_*: `if (ctas_per_row == 1) kernel<<<...>>> else
cudaLaunchCooperativeKernel`), whose CTAs must all be resident at once. Such a kernel cannot start
while another kernel (an NCCL collective's CTAs) holds more SMs than the margin leaves: it waits
for it, and the stream behind it (sim/interference.py). A kernel with one CTA per row starts on the
free SMs like any other.

`ctas_per_row` comes from TE's registries: a "tuned" launcher for the listed hidden sizes (used
when the rows are a multiple of 4 and the pointers aligned, as training's are), else the
"general" launcher of the smallest registered width at least the hidden size, or of the largest,
split over ceil(hidden / width) CTAs, when none is. The BF16 registrations:
"""
from __future__ import annotations

import math

# (norm, pass) -> ({tuned hidden size: CTAs per row}, largest general width)
_CTAS_PER_ROW = {
    ("layernorm", "fwd"): ({**dict.fromkeys((768, 1024, 1536, 2048, 2304, 3072, 3840, 4096, 5120, 6144, 8192,
                                             10240), 1),
                            **dict.fromkeys((12288, 12800, 15360, 16384, 18432, 20480, 24576, 25600), 2),
                            **dict.fromkeys((30720, 32768, 40960, 49152), 4), 65536: 8}, 8192),
    ("layernorm", "bwd"): ({**dict.fromkeys((768, 1024, 1536, 2048, 2304, 3072, 3840, 4096, 5120, 6144), 1),
                            8192: 2, 10240: 2, 12800: 5, 25600: 5,
                            **dict.fromkeys((12288, 15360, 16384, 18432, 20480, 24576, 30720, 32768, 40960), 4),
                            49152: 8, 65536: 8}, 4096),
    ("rmsnorm", "fwd"): (dict.fromkeys((512, 768, 1024, 2048, 4096, 8192), 1), 8192),
    ("rmsnorm", "bwd"): (dict.fromkeys((512, 768, 1024, 2048, 4096, 8192), 1), 4096),
}


def ctas_per_row(norm: str, phase: str, hidden: int) -> int:
    """CTAs one row of `hidden` elements takes in TE's `norm` kernel of `phase` ("fwd" / "bwd")."""
    tuned, general = _CTAS_PER_ROW[(norm, phase)]
    return tuned[hidden] if hidden in tuned else max(1, math.ceil(hidden / general))


def cooperative_norms(s) -> tuple[bool, bool]:
    """(forward, backward): whether the scenario's layer norms launch cooperatively. Under MXFP8
    the forward norm is cuDNN's (TE routes a norm with MXFP8 output to its cuDNN backend:
    layernorm/ln_api.cpp, rmsnorm/rmsnorm_api.cpp), not one of these."""
    norm, h = s.model.norm, s.model.hidden_size
    if norm not in ("layernorm", "rmsnorm") or h <= 0:
        return False, False
    mx = s.training.precision == "fp8" and s.training.fp8_recipe == "mxfp8"
    return (not mx and ctas_per_row(norm, "fwd", h) > 1), ctas_per_row(norm, "bwd", h) > 1


def waiting_norms(s, held: int) -> tuple[bool, bool]:
    """(forward, backward): whether the layer norms wait for a data-parallel collective holding
    `held` SMs: cooperative, and `training.norm_sm_margin` set below `held`."""
    margin = s.training.norm_sm_margin
    if margin is None or held <= margin:
        return False, False
    return cooperative_norms(s)


def norm_wait(s) -> dict | None:
    """When the scenario's layer norms wait for kernels beside them, {"margin", "dp": the data-
    parallel collectives' SMs if the norms wait for them (else 0), "a2a": the MoE dispatcher's
    under the A2A overlap (likewise), "sms": the margin that removes every wait}; else None. For the
    report's "why" and suggestions."""
    from pipesim.costs.moe_interference import comm_sms
    from pipesim.costs.nccl_channels import dp_collective_sms
    from pipesim.costs.topology import placement
    dp = dp_collective_sms(s, placement(s, "dp_cp"))
    a2a = comm_sms(s) if s.training.moe_a2a_overlap else 0
    dp, a2a = (h if any(waiting_norms(s, h)) else 0 for h in (dp, a2a))
    return {"margin": s.training.norm_sm_margin, "dp": dp, "a2a": a2a, "sms": max(dp, a2a)} if dp or a2a else None
