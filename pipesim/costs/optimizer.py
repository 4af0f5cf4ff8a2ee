"""Bytes the optimizer step moves through HBM, kernel by kernel, as Megatron-LM's mixed-precision
optimizer runs it (megatron/core/optimizer/optimizer.py, Float16OptimizerWithFloat16Params.step;
the distributed optimizer does the same on its shard):

  1. main gradients: `main_param.grad = model_param.main_grad.float()` -- free when the grad buffer
     is already fp32 (grad_reduce_in_fp32), otherwise a cast: read 2, write 4
  2. fp16 only: unscale + inf check (`torch._amp_foreach_non_finite_check_and_unscale_`): read 4,
     write 4 (bf16 runs without a loss scaler)
  3. the gradient norm reads the fp32 main gradients (4; its own op, GRAD_NORM)
  4. the optimizer kernel (apex/TE fused multi-tensor Adam): read fp32 master, grad, m, v; write
     master, m, v = 28 (with BF16 moments, TE FusedAdam's exp_avg_dtype / exp_avg_sq_dtype: 20;
     SGD with momentum: read master, grad, momentum; write master, momentum = 20;
     Muon: 42 per matrix parameter, pipesim/costs/muon.py, plus its Newton-Schulz GEMMs)
  5. `_copy_main_params_to_model_params` (multi-tensor copy): read fp32 master 4, write 16-bit
     weight 2 -- none when the master is kept as 16-bit remainders (training.master_weights): TE's
     FusedAdam then reads and writes the BF16 parameter and its remainder in step 4 (2 + 2 bytes,
     as many as the fp32 master), updating the parameter in place
and, once per step, the grad buffer is zeroed before the first micro-batch (`zero_grad_buffer`:
one write of the whole buffer, every parameter of the rank, not only its ZeRO shard).
All memory bound (the state sizes: Rajbhandari et al. 2020, Sec. 3.1).
"""
from __future__ import annotations

from pipesim.costs import muon

FP32 = 4
HALF = 2
UPDATE_BYTES = {"adam": 7 * FP32, "sgd": 5 * FP32, "muon": muon.UPDATE_BYTES}      # step 4


def mixed(precision: str) -> bool:
    """Mixed precision keeps fp32 master weights beside 16-bit model weights (FP8 training too)."""
    return precision not in ("fp32", "tf32")


def optimizer_bytes(optimizer: str, precision: str, grad_elem: int, local_params: float, params: float,
                    adam_local: float = 0.0, moment_bytes: int = FP32, master_bytes: int = FP32) -> float:
    """HBM bytes of steps 1, 2, 4, 5 over the rank's `local_params` (its ZeRO shard) plus the
    zeroing of the `params` x `grad_elem` grad buffer; `adam_local` of them are Muon's Adam share;
    `moment_bytes` per Adam moment (read and written once each in step 4); `master_bytes` 2: the
    master as remainders (no step 5)."""
    adam = UPDATE_BYTES["adam"] - 4 * (FP32 - moment_bytes)
    update = (adam if optimizer == "adam" else UPDATE_BYTES[optimizer]) * (local_params - adam_local) + adam * adam_local
    per = 0.0
    if mixed(precision):
        per += 0 if grad_elem == FP32 else grad_elem + FP32          # 1
        per += 2 * FP32 if precision == "fp16" else 0                 # 2
        per += FP32 + HALF if master_bytes == FP32 else 0             # 5
    return update + local_params * per + params * grad_elem


def grad_norm_bytes(local_params: float) -> float:
    """Step 3: the norm is taken over the fp32 main gradients (fp32 training: the gradients)."""
    return local_params * FP32
