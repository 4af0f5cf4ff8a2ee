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
