"""The CPU emulator's eager ring attention as the cost model prices it (pipesim/costs/eager_ring.py)."""
from __future__ import annotations

import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CP2 = os.path.join(ROOT, "scenarios", "emulator", "crosscheck_cp2.yaml")
HOST = {"layout": {"cores": 2, "ranks": 2, "threads_per_rank": 1}, "action_s": 0.0, "kernel_launch_s": 0.0}


def _profile(tmp_path, measurements, host=True):
    device = {"name": "cpu-core-fp32", "kind": "cpu"}
    if host:
        device["host"] = HOST
    path = tmp_path / ("host.json" if host else "plain.json")
    path.write_text(json.dumps({"version": 1, "device": device, "measurements": measurements}))
    return str(path)


def _m(op, shape, t):
    return {"op": op, "shape": shape, "median_s": t, "p10_s": t, "p90_s": t, "n": 5}


def test_each_exchange_requires_the_blocks_the_emulator_runs():
    from pipesim.costs.eager_ring import block_shape
    from pipesim.costs.summary import required_measurements
    from pipesim.emulator import prepare
    ring = [k for k, _ in required_measurements(prepare(CP2)) if k.startswith("ring_block")]
    assert ring == ["ring_block_fwd", "ring_block_bwd"]
    # all-gather: one block of the local queries against the whole sequence; all-to-all: one
    # whole-sequence block on heads/CP (mb 2 x 4 heads, seq 256 over CP 2)
    (gathered, n), = [block_shape(prepare(CP2, ["parallel.context_mode=allgather"]))]
    assert n == 1 and (gathered["batch"], gathered["q"], gathered["k"]) == (8, 128, 256)
    (swapped, n), = [block_shape(prepare(CP2, ["parallel.context_mode=a2a"]))]
    assert n == 1 and (swapped["batch"], swapped["q"], swapped["k"]) == (4, 256, 256)
    assert block_shape(prepare(CP2, ["parallel.context=1", "parallel.data=2"])) is None
    # hierarchical (CP 4 = pairs x 2): 2 ring steps of a pair's 128 tokens on 2 of the 4 heads
    usp = prepare(CP2, ["parallel.context=4", "parallel.context_mode=a2a+p2p", "parallel.context_a2a=2",
                        "system.gpus_per_node=4"])
    (block, n), = [block_shape(usp)]
    assert n == 2 and (block["batch"], block["q"], block["k"]) == (4, 128, 128)


def test_measured_ring_steps_replace_the_fused_blocks_on_cpu_host_profiles(tmp_path):
    from pipesim.costs.eager_ring import block_shape
    from pipesim.costs.stage import stage_costs
    from pipesim.emulator import prepare
    s = prepare(CP2)
    shape, steps_per_layer = block_shape(s)
    assert shape == dict(batch=8, q=128, k=128, head_dim=64, causal=True, dtype="fp32")   # mb 2 x 4 heads
    assert steps_per_layer == 2
    steps = [_m("ring_block_fwd", shape, 2e-3), _m("ring_block_bwd", shape, 5e-3)]
    base = stage_costs(prepare(CP2, [f"costs.profile={_profile(tmp_path, [])}"]))[0]
    with_steps = stage_costs(prepare(CP2, [f"costs.profile={_profile(tmp_path, steps)}"]))[0]
    layers = s.model.num_layers
    # the fused blocks' seconds leave, CP (2) measured steps per layer come in
    from pipesim.costs.context import PREFIX
    from pipesim.costs.stage import cost_model_for, costed_layer_ops
    prof = prepare(CP2, [f"costs.profile={_profile(tmp_path, steps)}"])
    cm = cost_model_for(prof)
    blocks = [o for o in costed_layer_ops(prof) if o.name.startswith(PREFIX)]
    fused_f = sum(cm.time(o, "fwd").seconds for o in blocks)
    fused_b = sum(cm.time(o, "bwd").seconds for o in blocks)
    assert with_steps.forward - base.forward == pytest.approx(layers * (2 * 2e-3 - fused_f))
    assert with_steps.backward - base.backward == pytest.approx(layers * (2 * 5e-3 - fused_b))
    # no host model (not the emulator's ranks): the fused blocks stay
    plain = stage_costs(prepare(CP2, [f"costs.profile={_profile(tmp_path, steps, host=False)}"]))[0]
    bare = stage_costs(prepare(CP2, [f"costs.profile={_profile(tmp_path, [], host=False)}"]))[0]
    assert plain.forward == pytest.approx(bare.forward)


def test_the_calibration_times_the_emulators_own_block_functions():
    import torch
    from pipesim.calibrate.ops import _BUILDERS
    from pipesim.emulator.context import block_forward, causal_mask
    shape = dict(batch=2, q=8, k=8, head_dim=4, causal=True, dtype="fp32")
    fwd, impl = _BUILDERS["ring_block_fwd"](shape, torch.device("cpu"))
    out, lse = fwd()
    assert impl == "torch" and out.shape == (2, 8, 4) and lse.shape == (2, 8)
    bwd, _ = _BUILDERS["ring_block_bwd"](shape, torch.device("cpu"))
    dq, dk, dv = bwd()
    assert dq.shape == dk.shape == dv.shape == (2, 8, 4)
    # a causal step's first query attends to its own key only
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 4)
    o, _ = block_forward(q, k, v, 0.5, causal_mask(torch.arange(3), torch.arange(3), q))
    assert torch.allclose(o[0, 0], v[0, 0])
