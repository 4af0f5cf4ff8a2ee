"""DeepSeek sparse attention in the emulator (pipesim/emulator/mla.py Indexer): the top-k mask is
real (all keys selected = plain MLA, fewer = another loss), and tensor, sequence and pipeline
parallelism give the loss and every gradient of one process."""
import os

import pytest

torch = pytest.importorskip("torch")

from _emulator_helpers import matches_single_process  # noqa: E402
from pipesim.emulator import prepare  # noqa: E402
from pipesim.errors import ScenarioError  # noqa: E402

TINY = os.path.join(os.path.dirname(__file__), "..", "scenarios", "emulator", "tiny_1f1b.yaml")
DSA = ["model.attention_variant=dsa", "model.q_lora_rank=16", "model.kv_lora_rank=16", "model.qk_rope_head_dim=8",
       "model.qk_nope_head_dim=16", "model.v_head_dim=16", "model.dsa_index_heads=4", "model.dsa_index_head_dim=16",
       "model.dsa_index_topk=8", "model.dsa_indexer_loss=none", "model.position=rotary", "model.norm=rmsnorm",
       "model.bias=false", "training.attention=flash"]


def test_selecting_every_key_is_plain_latent_attention():
    from pipesim.emulator.reference import single_process_grads
    sparse = single_process_grads(prepare(TINY, DSA))[0]
    every = single_process_grads(prepare(TINY, DSA + ["model.dsa_index_topk=32"]))[0]     # seq 32
    mla = single_process_grads(prepare(TINY, DSA + ["model.attention_variant=mla"]))[0]
    assert every == pytest.approx(mla, abs=0) and sparse != pytest.approx(mla, rel=1e-5)


def test_sparse_attention_with_tensor_sequence_and_pipeline_parallel(tmp_path):
    # the indexer runs duplicated on gathered inputs: every rank selects the keys one process does
    matches_single_process(TINY, tmp_path, DSA + ["parallel.tensor=2", "system.gpus_per_node=4",
                                                  "parallel.sequence_parallel=true", "training.schedule=zb-h1"],
                           timeout=120)


@pytest.mark.parametrize("sets,key", [(["model.dsa_indexer_loss=sparse"], "dsa_indexer_loss"),
                                      (["parallel.context=2", "parallel.pipeline=1", "parallel.context_mode=allgather"],
                                       "parallel.context")])
def test_the_indexer_loss_and_cp_are_refused_in_one_line(sets, key):
    from pipesim.emulator.model import check_supported
    with pytest.raises(ScenarioError, match=key) as e:
        check_supported(prepare(TINY, DSA + sets))
    assert "\n" not in str(e.value)
