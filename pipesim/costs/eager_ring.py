"""The CPU emulator's context-parallel attention (ring, all-gather, all-to-all), costed as it runs there.

The cost model times a CP rank's attention as the blockwise fused kernels a GPU runs
(pipesim/costs/context.py: exact causal work per block). The emulator's ring attention
(pipesim/emulator/context.py) is eager PyTorch instead: every one of the CP ring steps attends
the rank's whole local query block to a whole visiting K/V block (L x L, L = seq/CP, masked
entries computed) with a score GEMM, element-wise passes over the block (scale, the causal
mask built and added, logsumexp, subtract, exp) and the P·V GEMM; the backward recomputes the
scores. Measured on the 2-core builder (one thread, fp32, 8 x 128 x 128 x 64): one such step
3.2 ms against 0.6 ms for the fused SDPA of the same causal 128-token attention and 0.5 ms for its
two GEMMs alone, so the fused figure put crosscheck_cp2's forward 31-36 % short.

On CPU profiles with a host model (the emulator's ranks) a layer's CP blocks are therefore
replaced by the measured eager blocks (block_shape: CP ring steps, or one all-gather or
all-to-all block) (profile keys ring_block_fwd / ring_block_bwd, timed by the
calibration running the emulator's own block functions): the correction below is added to the
layer's forward and backward. Left as they were: the transfer overlap (context_comm) and full
recompute keep the fused block times.
"""
from __future__ import annotations

from pipesim.costs.context import PREFIX


def block_shape(s) -> tuple[dict, int] | None:
    """(profile shape of one eager block, blocks per layer) of the emulator's CP attention, or None
    when the scenario runs none: the ring's CP steps of L x L (L = seq/CP); the all-gather's one
    block of the local queries against the whole sequence; the all-to-all's one whole-sequence
    block on heads/CP; the hierarchical ring's CP/a steps of aL x aL on heads/a (a =
    context_a2a) (pipesim/emulator/context.py: the same block functions)."""
    mode, cp = s.parallel.context_mode, s.parallel.context
    if cp <= 1:
        return None
    from pipesim.costs.layers import shapes_of
    sh = shapes_of(s)
    bh, L, S = sh.b * sh.a / sh.tp.head_div, int(sh.s), int(s.model.seq_length)
    a = s.parallel.context_levels[0]
    q, k, batch, steps = {"ring": (L, L, bh, cp), "allgather": (L, S, bh, 1), "a2a": (S, S, bh / cp, 1),
                          # the ring over the groups: a group's tokens on heads / context_a2a
                          "a2a+p2p": (a * L, a * L, bh / a, cp // a)}[mode]
    return dict(batch=int(batch), q=q, k=k, head_dim=int(sh.d), causal=bool(s.model.causal),
                dtype=s.training.precision), steps


def lookups(s) -> list[tuple[str, dict]]:
    """The profile keys of the CP blocks (pipesim.costs.required_measurements)."""
    found = block_shape(s)
    return [] if found is None else [("ring_block_fwd", found[0]), ("ring_block_bwd", dict(found[0]))]


def layer_seconds(s, cm, layer_ops) -> tuple[float, float]:
    """(forward, backward) seconds to add to one layer: CP measured ring steps less the fused CP
    blocks the layer's ops cost; (0, 0) unless the profile is a CPU profile with a host model that
    measured both steps."""
    from pipesim.calibrate.host import host_of
    found = block_shape(s)
    if found is None or host_of(cm.profile) is None:
        return 0.0, 0.0
    shape, steps = found
    fwd, bwd = cm.profile.lookup("ring_block_fwd", **shape), cm.profile.lookup("ring_block_bwd", **shape)
    if fwd is None or bwd is None:
        return 0.0, 0.0
    blocks = [o for o in layer_ops if o.name.startswith(PREFIX)]
    return (steps * fwd[0] - sum(cm.time(o, "fwd").seconds for o in blocks),
            steps * bwd[0] - sum(cm.time(o, "bwd").seconds for o in blocks))
