"""NVLink SHARP all-reduce (system.intra_node.nvls_GBps): NCCL's NVLS algorithm on a whole node."""
import pytest

from pipesim import load_scenario
from pipesim.costs.collectives import NVLS_LATENCY_S, collective_time
from pipesim.costs.topology import placement
from pipesim.errors import ScenarioError

GiB = 2**30


def scenario(preset="dgx-h100", tensor=1, data=8, **system):
    return load_scenario({"model": {"preset": "gpt2-small"},
                          "system": {"preset": preset, "num_nodes": 1, **system},
                          "parallel": {"tensor": tensor, "pipeline": 1, "data": data},
                          "training": {"micro_batch_size": 1, "global_batch_size": data}})


def busbw(s, group="dp", nbytes=4 * GiB, kind="all_reduce"):
    n = placement(s, group).size
    return nbytes / collective_time(kind, nbytes, placement(s, group), "auto") * 2 * (n - 1) / n / 1e9


def test_a_whole_h100_node_all_reduces_at_the_nvls_rate_for_large_messages():
    s = scenario()
    # 4 GiB: the measured 480 GB/s bus bandwidth less NCCL's NVLS latency
    want = 4 * GiB * 7 / 4 / (NVLS_LATENCY_S + 4 * GiB * 7 / 4 / 480e9) / 1e9
    assert busbw(s) == pytest.approx(want)
    ring = scenario(intra_node={"nvls_GBps": None})
    assert busbw(ring) < 0.8 * busbw(s)
    # 64 kB: the 25 us NVLS latency loses to the ring, as NCCL's tuner picks
    assert collective_time("all_reduce", 65536, placement(s, "dp")) == \
        collective_time("all_reduce", 65536, placement(ring, "dp"))


def test_nvls_is_the_all_reduce_of_a_whole_node_only():
    s = scenario()
    ring = scenario(intra_node={"nvls_GBps": None})
    for kind in ("reduce_scatter", "all_gather"):        # NCCL's NVLS doubles the all-reduce only
        assert busbw(s, kind=kind) == busbw(ring, kind=kind)
    half = scenario(tensor=2, data=4)                   # 4 GPUs of a node: measured on 8, not used
    assert placement(half, "dp").nvls == 0.0 and placement(half, "tp").nvls == 0.0
    assert placement(scenario("dgx-a100-80gb"), "dp").nvls == 0.0   # no NVLink SHARP on A100
    assert placement(scenario("dgx-b200"), "dp").nvls == 830e9


def test_a_communicator_with_a_cta_cap_runs_no_nvls():
    s = load_scenario({"model": {"preset": "gpt2-small"}, "system": {"preset": "dgx-h100", "num_nodes": 1},
                       "parallel": {"tensor": 1, "pipeline": 1, "data": 8},
                       "training": {"micro_batch_size": 1, "global_batch_size": 8, "nccl_max_ctas": {"dp": 8}}})
    assert placement(s, "dp").nvls == 0.0


def test_a_bad_nvls_figure_names_the_key():
    with pytest.raises(ScenarioError, match="nvls_GBps") as e:
        scenario(intra_node={"nvls_GBps": -3})
    assert "\n" not in str(e.value)


def test_nvls_on_the_network_side_is_refused():
    with pytest.raises(ScenarioError, match="inter_node.nvls_GBps") as e:
        scenario(inter_node={"bandwidth_GBps": 50, "nvls_GBps": 400})
    assert "\n" not in str(e.value)
