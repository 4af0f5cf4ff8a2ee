"""HybridEP's kernel rate (costs/moe_dispatch.py) and how a2a_costs uses it."""
import pytest

from pipesim import load_scenario
from pipesim.costs.layers import shapes_of
from pipesim.costs.moe import a2a_costs, parts_hit
from pipesim.costs.moe_dispatch import HYBRIDEP_BLACKWELL, kernel_rate
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
    assert kernel_rate(qwen(moe_dispatcher="deepep"), 8, "dispatch", 2) is None
    assert kernel_rate(qwen(moe_dispatcher="alltoall"), 8, "dispatch", 2) is None
    assert kernel_rate(qwen("dgx-h100", moe_dispatcher="hybridep"), 8, "dispatch", 2) is None
    h100 = [a2a_costs(qwen("dgx-h100", moe_dispatcher=d), shapes_of(qwen("dgx-h100"))).fwd
            for d in ("deepep", "hybridep")]
    assert h100[0] == pytest.approx(h100[1])


def test_on_blackwell_hybridep_is_bound_by_its_sms_and_more_sms_shorten_it_down_to_the_link():
    def fwd(**tr):
        s = qwen(**tr)
        return a2a_costs(s, shapes_of(s)).fwd
    link = fwd(moe_dispatcher="deepep")
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
    # DeepEP and Hopper's HybridEP are link-bound: more SMs would not help
    assert a2a_candidates(qwen(moe_dispatcher="deepep", moe_a2a_overlap=True)) == []
    assert a2a_candidates(qwen("dgx-h100", moe_dispatcher="hybridep", moe_a2a_overlap=True)) == []


def test_the_report_says_what_paces_the_expert_all_to_all():
    from pipesim.costs.moe_dispatch import pace
    hy = pace(qwen(moe_dispatcher="hybridep"))
    assert hy["bound"] == "kernel" and hy["sms"] == 32
    assert hy["kernel_Bps"] == pytest.approx(519.57e9) and hy["kernel_Bps"] < hy["link_Bps"]
    assert pace(qwen(moe_dispatcher="hybridep", moe_dispatcher_sms=64))["bound"] == "link"
    assert pace(qwen(moe_dispatcher="deepep"))["bound"] == "link"
    assert pace(qwen("dgx-h100", moe_dispatcher="hybridep"))["kernel_Bps"] is None
