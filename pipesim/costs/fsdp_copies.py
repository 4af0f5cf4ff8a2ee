"""FSDP2's copy-out after each per-layer all-gather: a memory-bound op on the compute stream.

PyTorch's fully_shard (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py and
_fsdp_param_group.py) all-gathers a module's parameter shards into one flat buffer, then
`FSDPParamGroup.wait_for_unshard` makes the *current* (compute) stream wait for the all-gather
and calls `foreach_all_gather_copy_out`, which splits the buffer into every parameter's unsharded
tensor with one `torch.split_with_sizes_copy`: the gathered bytes are read once and written
once, on the compute stream, before the module's forward can start. With reshard_after_forward
(FSDP2's default) the backward gathers, and copies out, again.

Not charged here: the all-gather copy-in (`torch._foreach_copy_` of the local shard, 1/d of the
bytes, on its own stream) and the reduce-scatter copy-in (`torch._chunk_cat` of the unsharded
gradients into the reduce-scatter input, issued on the reduce-scatter stream beside the backward,
like the reduce-scatter itself); neither holds up the compute stream.
"""
from __future__ import annotations

from pipesim.costs.fp8 import gathered_bytes_per_param, stored_bytes

# split_with_sizes_copy moves each gathered byte twice: read from the all-gather output, written
# to the parameter's unsharded storage.
COPY_OUT_PASSES = 2


def copy_out_seconds(s, cm, params: float, fp8_params: float, elem: int) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch of FSDP2's copy-out for a stage whose GPU holds
    `params` parameters unsharded of `elem` bytes, `fp8_params` of them gathered in FP8 under FP8
    parameter storage (0 unless training.zero3_collectives is fsdp2); the backward copies again only when
    it gathers again (reshard_after_forward)."""
    tr = s.training
    if not tr.fsdp2 or s.parallel.data * s.parallel.context <= 1:
        return 0.0, 0.0
    # the same bytes per parameter as the all-gather moves (the compute dtype; FP8 storage: 1)
    share = fp8_params / params if tr.fp8_param_gather and params else 0.0
    seconds = cm.memory_time(COPY_OUT_PASSES * gathered_bytes_per_param(elem, share, stored_bytes(tr.fp8_recipe))
                             * params)
    return seconds, seconds if tr.reshard_after_forward else 0.0
