"""Activation offloading (training.offload_activation_layers): bytes, exposed copy time, memory by hand."""
from dataclasses import replace

import pytest

import pipesim
from pipesim.costs.stage import activation_offload
from pipesim.errors import ScenarioError
from _sim_helpers import tiny, uniform


def test_copies_hide_under_the_pass_until_they_outlast_it():
    s = tiny(P=2, M=2, extra_training={"offload_activation_layers": 2}, extra_system={"host_link_GBps": 1.0})
    # 2 of 4 layers of 100 bytes: 50 bytes leave, 25 (one layer) on the GPU while copied;
    # 50 bytes at 1 GB/s = 50 ns, hidden under a 1 s forward, exposed beyond a 20 ns backward
    assert activation_offload(s, 100.0, 4, 1.0, 20e-9) == pytest.approx((50.0, 25.0, 0.0, 30e-9))
    assert activation_offload(s, 100.0, 1, 1.0, 1.0)[:2] == (100.0, 100.0)       # more layers asked than held
    none = tiny(P=2, M=2)
    assert activation_offload(none, 100.0, 4, 1.0, 1.0) == (0.0, 0.0, 0.0, 0.0)


def test_peak_holds_the_kept_activations_of_every_micro_batch_in_flight_and_one_copied_layer():
    """1F1B on 2 ranks, 4 micro-batches of 1.0 activation bytes per stage. Rank 0 holds two
    micro-batches at its peak: 2.0 without offloading. With 0.5 of each offloaded and 0.25 (one
    layer) on the GPU while it is copied: F1 runs with micro-batch 0's 0.5 kept and its own 0.75
    = 1.25, as when B0 starts (0.5 + 0.75)."""
    s = tiny(P=2, M=4, memory_GiB=80)
    plain = uniform(s, act=1.0)
    offloaded = [replace(c, offload_bytes=0.5, offload_window=0.25) for c in plain]

    def activations(costs):
        r = pipesim.simulate(s, trace=False, stage_costs=costs)
        return r.ranks[0]["peak_memory_by_category"]["activations"]
    assert activations(plain) == pytest.approx(2.0)
    assert activations(offloaded) == pytest.approx(1.25)


def test_offloading_needs_the_systems_host_copy_rate():
    with pytest.raises(ScenarioError, match="training.offload_activation_layers.*host_link_GBps"):
        tiny(P=2, M=2, extra_training={"offload_activation_layers": 1})
    with pytest.raises(ScenarioError, match="offload_activation_layers must not be negative"):
        tiny(P=2, M=2, extra_training={"offload_activation_layers": -1}, extra_system={"host_link_GBps": 1.0})
    with pytest.raises(ScenarioError, match="host_link_GBps"):
        tiny(P=2, M=2, extra_system={"host_link_GBps": 0})


def test_presets_carry_their_measured_host_copy_rates():
    from pipesim.presets.systems import SYSTEMS
    assert SYSTEMS["dgx-h100"]["host_link_GBps"] == 52.8
    assert SYSTEMS["gb200-nvl72"]["host_link_GBps"] == 346.0
    assert SYSTEMS["dgx-a100-80gb"]["host_link_GBps"] == 25.0
