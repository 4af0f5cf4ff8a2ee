"""The fused dispatchers' kernel rates (costs/moe_dispatch.py) and how a2a_costs uses them."""
import pytest

from pipesim import load_scenario
from pipesim.costs.layers import shapes_of
from pipesim.costs.moe import a2a_costs, parts_hit
from pipesim.costs.moe_dispatch import DEEPEP_BLACKWELL, HYBRIDEP_BLACKWELL, kernel_rate
from pipesim.errors import ScenarioError


def qwen(system="dgx-b200", **training):
    return load_scenario({
        "model": {"preset": "qwen3-30b-a3b", "seq_length": 4096},
        "system": {"preset": system, "num_nodes": 1},
        "parallel": {"tensor": 1, "pipeline": 1, "data": 8, "expert": 8},
        "training": {"micro_batch_size": 4, "global_batch_size": 512, "precision": "bf16",
                     "moe_routing": "balanced", **training}})


def test_hybridep_rate_is_the_published_gb200_table_at_its_sm_counts_and_linear_between():
    for sms, (fp8, bf16, combine) in HYBRIDEP_BLACKWELL[8].items():
        s = qwen(moe_dispatcher="hybridep", moe_dispatcher_sms=sms)
        assert kernel_rate(s, 8, "dispatch", 2) == pytest.approx(bf16 * 1e9)
        assert kernel_rate(s, 8, "dispatch", 1) == pytest.approx(fp8 * 1e9)
        assert kernel_rate(s, 8, "combine", 2) == pytest.approx(combine * 1e9)
    mid = kernel_rate(qwen(moe_dispatcher="hybridep", moe_dispatcher_sms=20), 8, "combine", 2)
    assert mid == pytest.approx((310.21 + 425.95) / 2 * 1e9)
    # 64 NVLink peers (an NVL72 domain) take the largest measured row, 24 ranks
    assert kernel_rate(qwen(moe_dispatcher="hybridep"), 64, "combine", 2) == pytest.approx(207.10e9)


def test_no_table_means_the_link_alone_bounds_the_fused_kernels():
    assert kernel_rate(qwen(moe_dispatcher="deepep"), 8, "dispatch", 2, one_domain=False) is None
    assert kernel_rate(qwen(moe_dispatcher="alltoall"), 8, "dispatch", 2) is None
    assert kernel_rate(qwen("dgx-h100", moe_dispatcher="hybridep"), 8, "dispatch", 2) is None
    h100 = [a2a_costs(qwen("dgx-h100", moe_dispatcher=d), shapes_of(qwen("dgx-h100"))).fwd
            for d in ("deepep", "hybridep")]
    assert h100[0] == pytest.approx(h100[1])


def test_on_blackwell_hybridep_is_bound_by_its_sms_and_more_sms_shorten_it_down_to_the_link():
    def fwd(**tr):
        s = qwen(**tr)
        return a2a_costs(s, shapes_of(s)).fwd
    link = fwd(moe_dispatcher="hybridep", moe_dispatcher_sms=128)     # 4x the 32-SM rates: past the link
    t16, t32, t64 = (fwd(moe_dispatcher="hybridep", moe_dispatcher_sms=n) for n in (16, 32, 64))
    assert t16 > t32 > link and t64 == pytest.approx(link)
    # the time is the bytes a rank receives (its own included) at the table's rates
    s = qwen(moe_dispatcher="hybridep")
    sh = shapes_of(s)
    tokens = s.training.micro_batch_size * s.model.seq_length
    recv = tokens * s.model.hidden_size * 2 * parts_hit(s.model, 8)
    assert t32 == pytest.approx(recv / 615.78e9 + recv / 519.57e9, rel=0.02)
    assert sh.e == 2


def test_dispatcher_sms_errors_name_the_key():
    with pytest.raises(ScenarioError, match="training.moe_dispatcher_sms.*fewer than 148"):
        qwen(moe_dispatcher="hybridep", moe_dispatcher_sms=148)
    with pytest.raises(ScenarioError, match="moe_dispatcher_sms.*alltoall"):
        qwen(moe_dispatcher="alltoall", moe_dispatcher_sms=16)
    with pytest.raises(ScenarioError, match="moe_dispatcher_sms must be at least 1"):
        qwen(moe_dispatcher="hybridep", moe_dispatcher_sms=0)


def test_an_exposed_all_to_all_gets_its_candidates():
    from pipesim.report.suggest import a2a_candidates
    titles = [c[0] for c in a2a_candidates(qwen(moe_dispatcher="alltoall"))]
    assert titles == ["A2A overlap", "moe_dispatcher deepep", "moe_dispatcher hybridep"]
    hy = a2a_candidates(qwen(moe_dispatcher="hybridep", moe_a2a_overlap=True))
    assert [(c[0], c[1]) for c in hy] == [("64 dispatcher SMs", {"training.moe_dispatcher_sms": 64})]
    # DeepEP on Blackwell is bound by its SMs too; Hopper's fused kernels and HybridEP past the link are not
    assert [c[0] for c in a2a_candidates(qwen(moe_dispatcher="deepep", moe_a2a_overlap=True))] == ["40 dispatcher SMs"]
    assert a2a_candidates(qwen("dgx-h100", moe_dispatcher="hybridep", moe_a2a_overlap=True)) == []
    assert a2a_candidates(qwen(moe_dispatcher="hybridep", moe_dispatcher_sms=64, moe_a2a_overlap=True)) == []


def test_the_report_says_what_paces_the_expert_all_to_all():
    from pipesim.costs.moe_dispatch import pace
    hy = pace(qwen(moe_dispatcher="hybridep"))
    assert hy["bound"] == "kernel" and hy["sms"] == 32
    assert hy["kernel_Bps"] == pytest.approx(519.57e9) and hy["kernel_Bps"] < hy["link_Bps"]
    assert pace(qwen(moe_dispatcher="hybridep", moe_dispatcher_sms=64))["bound"] == "link"
    deepep = pace(qwen(moe_dispatcher="deepep"))
    assert deepep["bound"] == "kernel" and deepep["kernel_Bps"] == pytest.approx(190e9 * 20 / 24)
    assert pace(qwen("dgx-h100", moe_dispatcher="hybridep"))["kernel_Bps"] is None


def test_deepep_on_blackwell_runs_at_nvidias_nvl72_rate_inside_one_nvlink_domain_only():
    """NVIDIA's GB200 NVL72 figure (EP 32, 24 SMs: dispatch 400, combine 190 GB/s) paces DeepEP's
    kernels over one NVLink domain, scaled per SM; an EP group spanning DGX B200 nodes runs DeepEP's
    internode kernels, which no Blackwell figure covers: link-bound."""
    (sms, rates), = DEEPEP_BLACKWELL[32].items()
    assert (sms, rates[1], rates[2]) == (24, 400.0, 190.0)

    def dsv3(system, dispatcher, sms, **keys):
        return load_scenario({
            "model": {"preset": "deepseek-v3", "seq_length": 4096, "mtp_layers": 0},
            "system": {"preset": system, **keys},
            "parallel": {"tensor": 1, "pipeline": 8, "data": 32, "expert": 32,
                         "layers_per_stage": [7, 8, 8, 8, 8, 8, 8, 6]},
            "training": {"micro_batch_size": 1, "global_batch_size": 2048, "precision": "bf16",
                         "moe_routing": "balanced", "moe_dispatcher": dispatcher, "moe_dispatcher_sms": sms}})
    # NVIDIA's layout: 256 GB200, every 32 of them (8 trays) in one NVLink domain
    nvl = dsv3("gb200-nvl72", "deepep", 24, num_nodes=64, nvlink_domain=32)
    sh = shapes_of(nvl)
    recv = sh.tokens * nvl.model.hidden_size * 2 * parts_hit(nvl.model, 32)
    cost = a2a_costs(nvl, sh)
    assert cost.fwd == pytest.approx(recv / 400e9 + recv / 190e9, rel=0.02)
    # HybridEP at its 32 SMs (the guide's --moe-hybridep-num-sms) is the faster of the two, as NVIDIA found
    hybrid = dsv3("gb200-nvl72", "hybridep", 32, num_nodes=64, nvlink_domain=32)
    assert a2a_costs(hybrid, sh).fwd < cost.fwd
    dgx = dsv3("dgx-b200", "deepep", 24, num_nodes=32)
    assert kernel_rate(dgx, 8, "combine", 2, one_domain=False) is None
    # 4 DGX nodes: the links' pace, whatever the SMs
    dgx64 = dsv3("dgx-b200", "deepep", 64, num_nodes=32)
    assert a2a_costs(dgx, shapes_of(dgx)).fwd == pytest.approx(a2a_costs(dgx64, shapes_of(dgx64)).fwd)
