"""Layout copies of an eager PyTorch layer that no op of pipesim/costs/layers.py counts, timed as
memory copies of their size (profile key "copy") on CPU profiles with a host model, i.e. for the
emulator's ranks (pipesim/emulator/model.py, Block.attention):

  forward   the attention output [b*heads, s, d] transposed back to [s, b, heads*d] (a strided
            read and a contiguous write: `o.transpose(0, 1).reshape(...)`);
  backward  the gradients of q, k and v concatenated into the QKV output's gradient (autograd's
            backward of `split`), and, for the eager core, the two scalings of the gradients of
            q and k by the logits' 1/sqrt(d) (autograd's backward of `baddbmm(..., alpha)`).

Measured inside shape A's stage (issue 16) these were 0.05 ms forward and 0.3-0.4 ms backward per
layer, 2-3 % of a layer, always on the input-gradient path. Megatron-LM makes the same copies on
a GPU (`context.permute(...).contiguous()`, the split of mixed_x_layer), where they are small
beside the GEMMs and the analytic model leaves them out.
"""
from __future__ import annotations


def copy_bytes(s) -> tuple[list[int], list[int]]:
    """(forward, backward) copies of one layer, bytes each, on one GPU."""
    from pipesim.costs.layers import shapes_of
    sh = shapes_of(s)
    t = sh.tp.size if sh.tp.mode == "1d" else 1
    q = sh.tokens * sh.a * sh.d // t * sh.e              # the attention output, all tokens of the rank
    qkv = sh.tokens * (sh.a + 2 * sh.g) * sh.d // t * sh.e
    fwd = [int(q)]
    bwd = [int(qkv)]
    if s.training.attention != "flash" and s.parallel.context == 1:
        bwd += [int(q), int(q)]
    return fwd, bwd


def lookups(s) -> list[tuple[str, dict]]:
    """The profile keys of those copies (pipesim.costs.required_measurements)."""
    fwd, bwd = copy_bytes(s)
    return [("copy", {"bytes": n}) for n in sorted(set(fwd + bwd))]


def layer_copy_seconds(s, cm) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's copies; (0, 0) unless the cost model's profile
    is a CPU profile with a host model (the emulator's ranks)."""
    from pipesim.calibrate.host import host_of
    if host_of(cm.profile) is None or s.model.is_mla:
        return 0.0, 0.0

    def seconds(n: int) -> float:
        hit = cm.profile.lookup("copy", bytes=n)
        return hit[0] if hit is not None else cm.memory_time(2 * n)

    fwd, bwd = copy_bytes(s)
    return sum(map(seconds, fwd)), sum(map(seconds, bwd))
