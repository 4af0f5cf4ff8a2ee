"""DeepSpeed ZeRO-3's release rule (pipesim/costs/zero3_reuse.py): what each pass gathers."""
import pytest

from pipesim import load_scenario
from pipesim.costs.zero3_reuse import module_trace, trace_gathers, zero3_gather_passes


def test_a_use_gathers_unless_the_walk_since_the_last_use_stays_under_the_distance():
    # a (5) b (3) a: 3 elements in between -> kept under a distance of 4, gathered under 3
    uses = [("a", 5.0, "F"), ("b", 3.0, "F"), ("a", 5.0, "B")]
    assert trace_gathers(uses, max_reuse=4) == {"F": 8.0}
    assert trace_gathers(uses, max_reuse=3) == {"F": 8.0, "B": 5.0}
    # a module used twice in a row is always kept
    assert trace_gathers([("a", 5.0, "F"), ("a", 5.0, "B")], max_reuse=1) == {"F": 5.0}


def test_recompute_trace_runs_each_layer_forward_then_backward_in_reverse():
    uses = module_trace([[1.0, 2.0], [3.0, 4.0]], recompute=True)
    assert [(m, p) for m, _, p in uses] == [
        ("0.0", "F"), ("0.1", "F"), ("1.0", "F"), ("1.1", "F"),
        ("1.0", "B"), ("1.1", "B"), ("1.1", "B"), ("1.0", "B"),
        ("0.0", "B"), ("0.1", "B"), ("0.1", "B"), ("0.0", "B")]
    # without recompute the backward starts where the forward ended
    assert [m for m, _, _ in module_trace([[1.0, 2.0]], recompute=False)] == ["0.0", "0.1", "0.1", "0.0"]


def gpt(hidden, recompute, layers=8, **training):
    return load_scenario({
        "model": {"num_layers": layers, "hidden_size": hidden, "num_attention_heads": hidden // 128,
                  "seq_length": 2048, "vocab_size": 51200},
        "system": {"preset": "dgx-a100-80gb", "num_nodes": 1},
        "parallel": {"tensor": 1, "pipeline": 1, "data": 8},
        "training": {"micro_batch_size": 1, "global_batch_size": 8, "zero_stage": 3, "recompute": recompute,
                     **training}})


def test_large_layers_gather_all_but_their_last_matrix_again_for_the_backward():
    # hidden 12288: between the first MLP matrix's recomputed forward and its backward lie the
    # second's two uses, 8 h^2 = 1.2e9 elements > 1e9: only the last matrix (4 of 12 h^2) is kept
    fwd, bwd = zero3_gather_passes(gpt(12288, "full"))
    assert fwd == pytest.approx(1.0)
    assert bwd == pytest.approx(1 + 8 / 12, rel=1e-3)


def test_small_layers_keep_their_weights_from_the_recomputed_forward_to_the_backward():
    fwd, bwd = zero3_gather_passes(gpt(4096, "full", layers=32))
    assert fwd == pytest.approx(1.0)
    # the recompute gathers each layer once; the last layers' forward weights are still held
    assert 0.8 < bwd <= 1.0


def test_fsdp_gathers_each_layer_once_per_pass():
    assert zero3_gather_passes(gpt(12288, "full", zero3_collectives="layer")) == (1.0, 1.0)
    assert zero3_gather_passes(gpt(12288, "full", zero3_collectives="fsdp2")) == (1.0, 1.0)


def test_a_small_model_gathers_nothing_for_its_backward_and_still_simulates():
    from pipesim import simulate
    s = load_scenario("scenarios/seeds/004_roberta_dp2.yaml", ["training.zero_stage=3"])
    assert zero3_gather_passes(s) == (1.0, 0.0)           # 125M weights: every reuse within 1e9
    rep = simulate(s)
    gathers = [e for e in rep.events if e.kind == "ZERO_GATHER"]
    assert gathers and rep.data["step_time_s"] > 0
    # one forward gather per micro-batch and stage, none for the backward
    assert len(gathers) == s.num_microbatches * len(rep.data["stage_costs"])


def _peaks(raw):
    import pipesim
    return {z: pipesim.simulate(load_scenario(raw, overrides=[f"training.zero_stage={z}"]), trace=False)
            .peak_memory_bytes for z in (2, 3)}


def test_zero3_needs_no_more_memory_than_zero2():
    """ZeRO-3 shards the weights and holds one gathered layer per running action, plus the next
    action's when it prefetches: one layer in use and one prefetched. Before, each action held two
    layers on its own and the prefetch added two more: a 2-layer stage held 4 layers gathered and
    ZeRO-3 needed more than ZeRO-2 (here 20.0 against 18.1 GiB; the SC'21 1T GPT 28.9 against 25.5)."""
    raw = {"model": {"num_layers": 8, "hidden_size": 8192, "num_attention_heads": 64, "seq_length": 2048,
                     "vocab_size": 51200},
           "system": {"preset": "dgx-a100-80gb", "num_nodes": 1}, "parallel": {"pipeline": 4, "data": 2},
           "training": {"micro_batch_size": 1, "global_batch_size": 8, "recompute": "full"}}
    peak = _peaks(raw)
    assert peak[3] <= peak[2] * (1 + 1e-9)


def test_gathered_experts_take_their_bytes_not_their_time_equivalent():
    """An MoE stage's expert weights enter the gather's *time* at the expert-data-parallel group's
    time ratio (costs/moe.py); the memory they take once gathered is their real bytes. Counted at
    the ratio, gpt-oss-120b on 64 H100 needed 52.3 GiB under ZeRO-3 against 46.0 under ZeRO-2."""
    from pipesim.whatif.validation import case_scenario, load_cases
    raw = case_scenario(next(c for c in load_cases() if c.id == "bridge2604-h100-gpt-oss-120b-bf16"))
    peak = _peaks(raw)
    assert peak[3] <= peak[2] * (1 + 1e-9)


def test_experts_without_expert_data_parallelism_are_not_gathered():
    """With EDP 1 (expert x expert_tensor = tensor x data) each expert lives on one rank: ZeRO-3
    cannot shard it, so nothing of it is gathered. Counting the experts in the gathered layer, the
    MoE model zoo's TP2 x EP8 x PP32 Qwen3-235B layout needed 64.3 GiB under ZeRO-3 against 63.5
    under ZeRO-2."""
    from pipesim.costs import stage_costs
    from pipesim.costs.zero3_reuse import gather_units, gathered_param_bytes, stage_gathered_bytes
    s = load_scenario({"model": {"preset": "qwen3-30b-a3b", "seq_length": 4096},
                       "system": {"preset": "dgx-h100", "num_nodes": 2},
                       "parallel": {"tensor": 2, "pipeline": 2, "data": 4, "expert": 8, "sequence_parallel": True},
                       "training": {"micro_batch_size": 1, "global_batch_size": 16, "zero_stage": 3}})
    c = stage_costs(s)[0]
    assert c.expert_params > 0.5 * c.params
    dense_share = (c.params - c.expert_params) * (1 - 1 / 4) / gather_units(c)
    per_param = gathered_param_bytes(s.training, c)
    assert stage_gathered_bytes(s, c) == pytest.approx(per_param * dense_share)
