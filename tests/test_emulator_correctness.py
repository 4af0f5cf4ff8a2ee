"""The emulator really executes the plan: for every schedule, and with data and tensor
parallelism, the loss and every parameter gradient after one step equal a single-process run of
the same model on the same batch (to fp32 round-off). Each case starts 2-4 local processes."""
import os

import pytest

torch = pytest.importorskip("torch")

from _emulator_helpers import matches_single_process  # noqa: E402
from pipesim.emulator import emulate, prepare  # noqa: E402
from pipesim.emulator.reference import assemble_grads, single_process_grads  # noqa: E402

HERE = os.path.dirname(__file__)
TINY = os.path.join(HERE, "..", "scenarios", "emulator", "tiny_1f1b.yaml")


def check_against_single_process(tmp_path, sets):
    return matches_single_process(TINY, tmp_path, sets, timeout=60)


@pytest.mark.parametrize("schedule,virtual", [("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2),
                                              ("zb-h1", 1), ("zb-v", 2)])
def test_every_schedule_matches_one_process(tmp_path, schedule, virtual):
    s, result = check_against_single_process(
        tmp_path, [f"training.schedule={schedule}", f"parallel.virtual_stages={virtual}"])
    kinds = {e["kind"] for e in result["events"]}
    assert {"F", "SEND_F", "RECV_F", "SEND_B", "RECV_B"} <= kinds
    if schedule.startswith("zb"):
        assert {"I", "W"} <= kinds and "B" not in kinds
    # every compute action of the plan ran once per measured step, on the rank that owns its stage
    n_f = sum(1 for e in result["events"] if e["kind"] == "F")
    assert n_f == s.num_model_stages * s.num_microbatches


def test_grouped_interleaving_matches_one_process(tmp_path):
    """Megatron-Core's micro-batch groups (training.microbatch_group_size): the 4 micro-batches
    enter each chunk as one group instead of two groups of P = 2; the ranks run that plan."""
    s, result = check_against_single_process(
        tmp_path, ["training.schedule=interleaved", "parallel.virtual_stages=2", "training.microbatch_group_size=4"])
    firsts = [e["microbatch"] for e in sorted(result["events"], key=lambda e: e["start"])
              if e["kind"] == "F" and e["rank"] == 0 and e["step"] == result["events"][0]["step"]][:4]
    assert firsts == [0, 1, 2, 3]          # chunk 0 runs the whole group before chunk 1


def test_data_parallel_matches_one_process(tmp_path):
    _, result = check_against_single_process(tmp_path, ["parallel.pipeline=1", "parallel.data=2",
                                                        "training.schedule=gpipe"])
    assert any(e["kind"] == "DP" for e in result["events"])


def test_tensor_and_pipeline_parallel_match_one_process(tmp_path):
    s, result = check_against_single_process(tmp_path, ["parallel.tensor=2", "system.gpus_per_node=4"])
    tp = [e for e in result["events"] if e["kind"] == "TP"]
    assert tp and all(e["bytes"] > 0 for e in tp)
    # scatter/gather: each TP rank sends half the activation, the receivers all-gather it
    full = s.model.seq_length * s.training.micro_batch_size * s.model.hidden_size * 4
    assert {e["bytes"] for e in result["events"] if e["kind"] in ("SEND_F", "SEND_B")} == {full // 2}
    assert any(e["args"].get("phase") == "p2p_gather" for e in tp)


def test_tensor_parallel_tied_embeddings_full_recompute(tmp_path):
    check_against_single_process(tmp_path, ["parallel.tensor=2", "parallel.pipeline=1",
                                            "model.tied_embeddings=true", "training.recompute=full"])


def test_block_recompute_of_the_first_layer_matches_one_process(tmp_path):
    s, _ = check_against_single_process(tmp_path, ["training.recompute=full", "training.recompute_num_layers=1"])
    # the stage's first layer recomputes, the others keep their activations
    from pipesim.emulator.layers import TPGroup, WeightGradStore
    from pipesim.emulator.model import Builder, StageModel
    stage = StageModel(Builder(s, TPGroup(), WeightGradStore(), 0, torch.float32), 0, 0, 2, True, False)
    assert [layer.recompute for layer in stage.layers] == ["full", "none"]


def test_selective_recompute_with_split_backward(tmp_path):
    check_against_single_process(tmp_path, ["training.recompute=selective", "training.schedule=zb-h1"])


def test_activation_compression_records_reconstruction_error(tmp_path):
    s = prepare(TINY, ["training.activation_compression_bits=8"])
    result = emulate(s, steps=1, warmup=0, dump_grads=True, run_dir=str(tmp_path), timeout=60)
    q = result["quantization_rel_error"]
    # int8 absmax per group of 128: error ~ 1/(sqrt(3)*127) of the group range, well under 2 %
    assert 0 < q["mean"] < 0.02
    sends = [e for e in result["events"] if e["kind"] == "SEND_F"]
    elems = s.training.micro_batch_size * s.model.seq_length * s.model.hidden_size
    # 1 byte per element plus one fp32 scale per 128 elements
    assert sends[0]["bytes"] == elems + 4 * (elems // 128)
    loss, _ = assemble_grads(str(tmp_path))
    ref_loss, _ = single_process_grads(s)
    assert loss == pytest.approx(ref_loss, rel=1e-3)


def test_llama_style_blocks_with_tensor_parallel(tmp_path):
    # grouped-query attention (2 kv heads for 4 query heads), rotary positions, SwiGLU, RMSNorm
    check_against_single_process(tmp_path, ["model.num_kv_heads=2", "model.position=rotary",
                                            "model.activation=swiglu", "model.norm=rmsnorm", "model.bias=false",
                                            "parallel.tensor=2", "parallel.pipeline=1", "training.schedule=gpipe"])


def test_sequence_parallel_with_split_backward(tmp_path):
    # Megatron sequence parallelism: norms/dropouts/residuals on sequence shards, all-gather and
    # reduce-scatter around the tensor-parallel matmuls, each TP rank sending its shard downstream
    _, result = check_against_single_process(tmp_path, ["parallel.tensor=2", "system.gpus_per_node=4",
                                                        "parallel.sequence_parallel=true", "training.schedule=zb-h1"])
    s = prepare(TINY)
    shard_bytes = s.model.seq_length // 2 * s.training.micro_batch_size * s.model.hidden_size * 4
    assert {e["bytes"] for e in result["events"] if e["kind"] == "SEND_F"} == {shard_bytes}


@pytest.mark.parametrize("layout", [
    # duplicated down-projections on each rank's sequence shard, the latents all-gathered at the
    # column-parallel up-projections, 2 pipeline ranks, split backward
    ["model.q_lora_rank=16", "system.gpus_per_node=4", "parallel.sequence_parallel=true", "training.schedule=zb-h1"],
    # no query compression, no sequence parallelism (every rank runs every token), full recompute
    ["model.q_lora_rank=null", "parallel.pipeline=1", "training.schedule=gpipe", "training.recompute=full"]])
def test_latent_attention_with_tensor_and_pipeline_parallel(tmp_path, layout):
    # MLA (DeepSeek-V2/V3): the shared rope key, a fused kernel with q/k dim 24 and v dim 16
    check_against_single_process(tmp_path, [
        "model.attention_variant=mla", "model.kv_lora_rank=16", "model.qk_rope_head_dim=8",
        "model.qk_nope_head_dim=16", "model.v_head_dim=16", "model.position=rotary", "model.norm=rmsnorm",
        "model.bias=false", "training.attention=flash", "parallel.tensor=2"] + layout)


def test_sent_tensors_are_held_by_the_schedule_window_not_the_step(tmp_path):
    """A sent activation is kept only until a later message from its receiver proves it arrived:
    under 1F1B the messages held per peer stay at the warm-up depth whatever the micro-batch count
    (holding every send to the step's end grew with it: 50,000 micro-batches stalled)."""
    peak = {}
    for m in (4, 16):
        s = prepare(TINY, [f"training.global_batch_size={2 * m}"])
        result = emulate(s, steps=1, warmup=0, run_dir=str(tmp_path / str(m)), timeout=60)
        held = [e["args"]["held"] for e in result["events"] if e["kind"] in ("SEND_F", "SEND_B")]
        assert len(held) == 2 * m
        peak[m] = max(held)
    assert peak[4] == peak[16] <= 2
