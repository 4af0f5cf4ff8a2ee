"""system.pod_gpus / pod_oversubscription: communicators that cross an oversubscribed layer slow down."""
import pytest

from pipesim import load_scenario, simulate
from pipesim.costs.pods import a2a_factor, p2p_factor, ring_factor
from pipesim.errors import ScenarioError

LLAMA = {"model": {"preset": "llama3.1-405b", "seq_length": 8192, "num_layers": 32},
         "system": {"preset": "dgx-h100", "num_nodes": 512},
         "parallel": {"tensor": 8, "pipeline": 16, "data": 32, "sequence_parallel": True},
         "training": {"micro_batch_size": 1, "global_batch_size": 512, "recompute": "full", "zero_stage": 1}}


def _s(*sets):
    return load_scenario(LLAMA, list(sets))


def test_factors_follow_the_members_a_pod_holds():
    s = _s("system.pod_gpus=256", "system.pod_oversubscription=7")
    assert ring_factor(s, range(0, 4096, 128)) == pytest.approx(2 / 7)      # 2 members in each pod
    assert ring_factor(s, range(0, 4096, 8)) == 1.0                        # 32 members a pod: 32 / 7 > 1
    assert ring_factor(s, range(0, 256, 8)) == 1.0                         # inside one pod
    # 64 all-to-all members, 4 a pod, 1 an island: of the 63/64 of a member's bytes on the inter
    # link, 15/16 cross pods, at 1/(7 x 15/16) of the rate
    share = (15 / 16) / (63 / 64)
    assert a2a_factor(s, range(0, 4096, 64), 1) == pytest.approx(1 / ((1 - share) + share * 7 * 15 / 16))
    assert p2p_factor(s, 0, 256, senders=256) == pytest.approx(1 / 7) and p2p_factor(s, 0, 8, 256) == 1.0
    flat = _s()
    assert ring_factor(flat, range(0, 4096, 128)) == a2a_factor(flat, range(0, 4096, 64), 1) == 1.0


def test_llama3s_order_keeps_its_traffic_inside_its_pods():
    """Llama 3's pods of 3,072 GPUs behind a 1:7 layer (Dubey et al. 2024, Sec. 3.3.1) cost its
    [TP, CP, PP, DP] order nothing; smaller pods slow whichever dimension crosses them."""
    meta, megatron = "parallel.rank_order=tp-cp-pp-dp", "parallel.rank_order=tp-cp-dp-pp"
    pods = ("system.pod_oversubscription=7",)
    flat = simulate(_s(meta)).step_time_s
    assert simulate(_s(meta, "system.pod_gpus=3072", *pods)).step_time_s == pytest.approx(flat)
    small_dp = simulate(_s(meta, "system.pod_gpus=256", *pods))        # 2 data-parallel members a pod
    small_pp = simulate(_s(megatron, "system.pod_gpus=256", *pods))    # a pipeline stage per pod
    base_pp = simulate(_s(megatron))
    assert small_dp.step_time_s > flat and small_dp.exposed_comm_s["DP"] > 10 * simulate(_s(meta)).exposed_comm_s["DP"]
    assert small_pp.exposed_comm_s["P2P"] > 2 * base_pp.exposed_comm_s["P2P"]
    assert small_pp.step_time_s > base_pp.step_time_s


def test_expert_all_to_all_across_pods_is_slower():
    moe = {"model": {"preset": "qwen3-30b-a3b", "seq_length": 4096}, "system": {"preset": "dgx-h100", "num_nodes": 8},
           "parallel": {"data": 64, "expert": 64}, "training": {"micro_batch_size": 1, "global_batch_size": 64}}
    flat = simulate(load_scenario(moe)).moe["a2a_total_s"]
    podded = simulate(load_scenario(moe, ["system.pod_gpus=16", "system.pod_oversubscription=4"])).moe["a2a_total_s"]
    assert podded > 1.5 * flat


@pytest.mark.parametrize("sets, words", [(("system.pod_oversubscription=0.5",), "pod_oversubscription must be at least 1"),
                                         (("system.pod_gpus=12",), "multiple of gpus_per_node(8)")])
def test_bad_pods_are_one_line_errors(sets, words):
    with pytest.raises(ScenarioError, match="system") as err:
        _s(*sets)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("order", ["tp-cp-pp-dp", "tp-cp-dp-pp", "tp-dp-pp"])
@pytest.mark.parametrize("pods", [256, 2560, 3072])
def test_stage_boundary_senders_match_counting_every_rank(order, pods):
    from pipesim.costs.topology import coords, pod_senders, rank_of
    s = _s(f"parallel.rank_order={order}", f"system.pod_gpus={pods}", "system.pod_oversubscription=7")
    for src_pp in range(16):
        for dst_pp in ((src_pp + 1) % 16, (src_pp - 1) % 16):
            src, dst = rank_of(s, tp=3, dp=17, pp=src_pp), rank_of(s, tp=3, dp=17, pp=dst_pp)
            pod = src // pods
            counted = sum(1 for r in range(pod * pods, min(s.num_gpus, (pod + 1) * pods))
                          if coords(s, r)["pp"] == src_pp and (r + dst - src) // pods != pod)
            assert pod_senders(s, src, dst) == counted


def test_explain_suggests_the_order_that_keeps_traffic_inside_pods():
    from pipesim.report.explain import explain
    s = _s("parallel.rank_order=tp-cp-pp-dp", "system.pod_gpus=256", "system.pod_oversubscription=7")
    why = explain(simulate(s, trace=True), s)
    fix = [x for x in why["suggestions"] if x["title"] == "rank_order tp-cp-dp-pp"]
    assert fix and fix[0]["step_time_s"] == pytest.approx(simulate(_s("system.pod_gpus=256",
                                                                     "system.pod_oversubscription=7")).step_time_s)


def test_search_tries_both_rank_orders_on_a_podded_network(tmp_path, capsys):
    import yaml
    from pipesim.cli import main
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(dict(LLAMA, system={"preset": "dgx-h100", "num_nodes": 512, "pod_gpus": 256,
                                                        "pod_oversubscription": 7}, parallel={})))
    assert main(["search", str(path), "--gpus", "4096", "--no-files", "--no-progress", "--engine", "analytic",
                 "--tensor", "8", "--pipeline", "16", "--context", "1", "--micro-batch", "1", "--recompute", "full",
                 "--zero", "1", "--schedules", "1f1b"]) == 0
    out = capsys.readouterr().out
    assert " rank_order " in out
    rows = [line.split() for line in out.splitlines() if " 1f1b " in line]
    steps = {(r[11], r[12]): float(r[13]) for r in rows}          # (bits, order) -> step s
    # each order pays for what it sends across the 1:7 layer: the two differ at equal settings
    assert {o for _, o in steps} == {"tp-cp-pp-dp", "tp-cp-dp-pp"}
    assert steps[("16", "tp-cp-pp-dp")] != pytest.approx(steps[("16", "tp-cp-dp-pp")], rel=0.01)
