"""training.nccl_max_ctas: a communicator capped at C CTAs moves at most C CTAs' share of NVLink
(NCCL: 2 CTAs per NVLink, topo.h's per-link bandwidth) and leaves a node through at most C NICs."""
import pytest

import pipesim
from pipesim.costs.collectives import collective_time
from pipesim.costs.nccl_channels import cta_bandwidth, max_ctas
from pipesim.costs.topology import placement
from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario


def raw(system="dgx-h100", nodes=4, caps=None, gpus=8, **training):
    tr = {"micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16", "zero_stage": 1,
          "overlap_grad_reduce": True, **training}
    if caps is not None:
        tr["nccl_max_ctas"] = caps
    return {"model": {"preset": "llama3-8b", "num_layers": 4, "seq_length": 4096},
            "system": {"preset": system, "num_nodes": nodes},
            "parallel": {"tensor": 2, "pipeline": 1, "data": nodes * gpus // 2, "sequence_parallel": True},
            "training": tr}


def test_one_cta_carries_half_an_nvlink_of_nccls_own_bandwidth():
    assert cta_bandwidth(load_scenario(raw())) == pytest.approx(10.3e9)                 # Hopper 20.6 / 2
    assert cta_bandwidth(load_scenario(raw("gb200-nvl72", 2, gpus=4))) == pytest.approx(20.05e9)  # Blackwell 40.1 / 2
    # A100's 24 CTAs over 12 NVLinks make NCCL's 240 GB/s (NVIDIA/nccl issue #1225)
    a100 = load_scenario(raw("dgx-a100-80gb", 1))
    assert 24 * cta_bandwidth(a100) == pytest.approx(240e9)


def test_a_capped_gradient_group_is_slower_by_its_cta_share_and_its_nics():
    free, capped = load_scenario(raw()), load_scenario(raw(caps={"dp": 2}))
    g0, g1 = placement(free, "dp_cp"), placement(capped, "dp_cp")
    assert max_ctas(capped, "dp_cp") == 2                       # the gradient group falls back on dp
    assert g1.intra.bandwidth == pytest.approx(2 * 10.3e9) and g1.intra.bandwidth < g0.intra.bandwidth
    assert g0.per_node == 4 and g1.inter.bandwidth == pytest.approx(g0.inter.bandwidth * 2 / 4)   # 2 of 4 NICs
    B = 2**30
    assert collective_time("reduce_scatter", B, g1) > 3 * collective_time("reduce_scatter", B, g0)
    assert pipesim.simulate(raw(caps={"dp": 2})).step_time_s > pipesim.simulate(raw()).step_time_s
    # a cap above what NCCL would use anyway changes nothing
    assert placement(load_scenario(raw(caps={"dp_cp": 64})), "dp_cp") == g0


def test_tp_overlapped_by_userbuffers_is_not_capped():
    """Transformer Engine's userbuffers run the overlapped TP collectives outside NCCL."""
    on = load_scenario(raw(caps={"tp": 1}, overlap_tp_comm=True))
    off = load_scenario(raw(caps={"tp": 1}))
    assert max_ctas(on, "tp") == 0 and max_ctas(off, "tp") == 1
    assert placement(off, "tp").intra.bandwidth == pytest.approx(10.3e9)


@pytest.mark.parametrize("caps, words", [({"ep": 4}, "training.nccl_max_ctas.ep"),
                                         ({"dp": 0}, "nccl_max_ctas[dp] must be at least 1"),
                                         ({"dp": "eight"}, "training.nccl_max_ctas.dp")])
def test_bad_caps_are_one_line_errors_naming_the_key(caps, words):
    with pytest.raises(ScenarioError) as err:
        load_scenario(raw(caps=caps))
    assert words in str(err.value) and "\n" not in str(err.value)
