"""Context parallelism in the emulator: a real K/V ring between CPU processes gives the loss and
every gradient of a single-process run (fp32 round-off), alone and with pipeline, tensor and
data parallelism. Each case starts 2-4 local processes."""
import os

import pytest

torch = pytest.importorskip("torch")

from _emulator_helpers import matches_single_process  # noqa: E402
from pipesim.emulator.context import chunk_positions  # noqa: E402

HERE = os.path.dirname(__file__)
TINY_CP = os.path.join(HERE, "..", "scenarios", "emulator", "tiny_cp2.yaml")


def check(tmp_path, sets):
    return matches_single_process(TINY_CP, tmp_path, sets, timeout=90)


def test_balanced_chunks_cover_the_sequence_once():
    got = torch.cat([chunk_positions(32, 4, r, "balanced") for r in range(4)])
    assert sorted(got.tolist()) == list(range(32))
    assert chunk_positions(32, 4, 0, "balanced").tolist() == [0, 1, 2, 3, 28, 29, 30, 31]


def test_cp2_ring_matches_one_process(tmp_path):
    _, result = check(tmp_path, [])
    ring = [e for e in result["events"] if e["args"].get("phase") in ("cp_fwd", "cp_bwd")]
    assert {e["args"]["phase"] for e in ring} == {"cp_fwd", "cp_bwd"} and all(e["bytes"] > 0 for e in ring)


def test_cp2_learned_positions_contiguous_layout(tmp_path):
    check(tmp_path, ["model.position=learned", "parallel.context_layout=contiguous"])


def test_cp2_times_pp2_on_four_ranks(tmp_path):
    s, result = check(tmp_path, ["parallel.pipeline=2", "system.gpus_per_node=4"])
    assert s.num_gpus == 4 and any(e["kind"] == "SEND_F" for e in result["events"])


def test_cp2_with_tensor_parallel_and_sequence_parallel(tmp_path):
    check(tmp_path, ["parallel.tensor=2", "parallel.sequence_parallel=true", "system.gpus_per_node=4"])


@pytest.mark.parametrize("sets", [
    ["parallel.context_mode=allgather"],                      # K/V gathered, dK/dV sent home
    ["parallel.context_mode=a2a"],                            # Ulysses: heads <-> sequence
    ["parallel.context_mode=a2a", "parallel.tensor=2", "parallel.sequence_parallel=true",
     "system.gpus_per_node=4", "model.num_attention_heads=8", "model.num_kv_heads=4"],
    # USP: the all-to-all inside pairs, the ring over the two pairs on the head shards
    ["parallel.context_mode=a2a+p2p", "parallel.context=4", "parallel.context_a2a=2",
     "system.gpus_per_node=4"]])
def test_allgather_and_all_to_all_exchanges_match_one_process(tmp_path, sets):
    s, result = check(tmp_path, sets)
    moved = [e for e in result["events"] if e["args"].get("phase") in ("cp_fwd", "cp_bwd")]
    assert {e["args"]["phase"] for e in moved} == {"cp_fwd", "cp_bwd"} and all(e["bytes"] > 0 for e in moved)
    if s.parallel.context_mode == "allgather":
        # forward: the other member's K and V, at their own (grouped-query) head count, as the
        # cost model counts them: 2 x batch x kv heads x local tokens x head dim, fp32
        local = s.model.seq_length // 2 * s.training.micro_batch_size
        kv = 2 * local * s.model.kv_heads * s.model.head_dim * 4
        assert {e["bytes"] for e in moved if e["args"]["phase"] == "cp_fwd"} == {kv}


@pytest.mark.parametrize("mode", ["ring", "a2a"])
def test_latent_attention_under_context_parallelism(tmp_path, mode):
    # MLA: K (nope + rope) and V (v dim) of different widths travel together; the rope key's
    # positions are the rank's own chunks'
    check(tmp_path, ["model.attention_variant=mla", "model.q_lora_rank=16", "model.kv_lora_rank=16",
                     "model.qk_rope_head_dim=8", "model.qk_nope_head_dim=16", "model.v_head_dim=16",
                     "model.num_kv_heads=null", "training.attention=flash", f"parallel.context_mode={mode}"])


@pytest.mark.parametrize("sets", [
    ["training.document_length=5"],                                        # the K/V ring
    ["training.document_length=5", "parallel.context_mode=allgather"],
    ["training.document_length=5", "parallel.context_mode=a2a"],
    ["training.document_length=5", "parallel.pipeline=2", "system.gpus_per_node=4"],           # CP x PP
    ["training.document_length=5", "parallel.context_mode=a2a+p2p", "parallel.context=4",      # USP
     "parallel.context_a2a=2", "system.gpus_per_node=4"],
    ["training.document_length=5", "parallel.context=1", "parallel.data=2"],               # eager, no CP
    ["training.document_length=5", "parallel.context=1", "parallel.data=2", "training.attention=flash"],
])
def test_packed_documents_mask_every_exchange_as_one_process(tmp_path, sets):
    # documents of ~5 tokens cross the 8-token chunks: every ring step, gathered block and head
    # shard must hide the keys of other documents as the single process does
    from pipesim.emulator.reference import single_process_grads
    s, _ = check(tmp_path, sets)
    whole = [x for x in sets if not x.startswith("training.document_length")]
    from pipesim.emulator import prepare
    assert single_process_grads(s)[0] != pytest.approx(single_process_grads(prepare(TINY_CP, whole))[0], rel=1e-3)
