"""MLA under tensor parallelism as Megatron-Core's Transformer Engine spec builds it
(pipesim/costs/mla.py): duplicated down-projections on the rank's own tokens, the sequence-parallel
all-gather of the latents at the up-projections, the normalized input kept once."""
import pytest

from pipesim import load_scenario
from pipesim.costs.layers import layer_ops
from pipesim.costs.summary import total_params

H, RQ, RKV, ROPE, S = 7168, 1536, 512, 64, 4096


def mla(tensor=8, sp=True, precision="bf16", mode="1d"):
    # dense layers: MoE with tensor parallelism needs sequence parallelism
    return load_scenario({
        "model": {"preset": "deepseek-v3", "num_layers": 4, "num_experts": 0, "moe_first_dense_layers": 0,
                  "seq_length": S},
        "system": {"preset": "dgx-h100", "num_nodes": 1},
        "parallel": {"tensor": tensor, "sequence_parallel": sp, "data": 8 // tensor, "tensor_mode": mode},
        "training": {"micro_batch_size": 1, "global_batch_size": 8, "precision": precision}})


def ops_of(s):
    return {o.name: o for o in layer_ops(s)}


def test_down_projections_are_duplicated_on_the_local_tokens():
    ops = ops_of(mla())
    q = ops["q_down"]
    assert q.params == H * RQ                                  # the whole weight on every rank
    assert q.flops_fwd == 2 * (S / 8) * H * RQ                 # its own sequence shard
    assert q.comm_fwd == () and ops["kv_down"].comm_fwd == ()
    assert ops["q_norm"].flops_fwd == pytest.approx(8 * (S / 8) * RQ)


def test_the_latents_are_gathered_not_the_hidden_state():
    ops = ops_of(mla())
    (q_ag,) = ops["q_up"].comm_fwd
    (kv_ag,) = ops["kv_up"].comm_fwd
    assert (q_ag.kind, q_ag.bytes) == ("all_gather", S * RQ * 2)
    assert (kv_ag.kind, kv_ag.bytes) == ("all_gather", S * (RKV + ROPE) * 2)
    attention_side = sum(c.bytes for n in ("q_down", "q_norm", "q_up", "kv_down", "kv_norm", "kv_up")
                         for c in ops[n].comm_fwd)
    assert attention_side < 0.3 * S * H * 2                    # less than a third of one hidden-state gather


def test_the_normalized_input_is_kept_once_except_under_fp8():
    ops = ops_of(mla())
    assert ops["q_down"].saved_bytes == (S / 8) * H * 2 and ops["kv_down"].saved_bytes == 0
    fp8 = ops_of(mla(precision="fp8"))
    assert fp8["q_down"].saved_bytes == fp8["kv_down"].saved_bytes == (S / 8) * H   # a 1-byte copy each


def test_without_sequence_parallelism_every_rank_runs_every_token():
    ops = ops_of(mla(sp=False))
    assert ops["q_down"].flops_fwd == 2 * S * H * RQ
    assert ops["q_up"].comm_fwd == ()


def test_parameter_count_does_not_depend_on_the_split():
    assert total_params(mla(tensor=8)) == total_params(mla(tensor=1))


def test_rope_and_operand_layout_is_one_memory_pass():
    ops = ops_of(mla(tensor=2))
    heads, T, e = 128 // 2, S, 2
    rope = ops["mla_rope"]
    # read q and [k_nope; v] of the local heads and the shared rope key; write Q, K, V
    reads = heads * (192 + 128 + 128) + 64
    writes = heads * (2 * 192 + 128)
    assert rope.bytes_fwd == rope.bytes_bwd == T * (reads + writes) * e
    assert rope.kind == "vector" and rope.saved_bytes == 0


def test_latent_attention_runs_a_fused_kernel():
    from pipesim.errors import ScenarioError
    assert mla().training.attention == "flash"              # the default, for MLA and DSA
    with pytest.raises(ScenarioError) as e:
        load_scenario({"model": "deepseek-v3", "system": {"preset": "dgx-h100", "num_nodes": 1},
                       "parallel": {"data": 8, "expert": 8}, "training": {"global_batch_size": 8, "attention": "eager"}})
    assert "training.attention" in str(e.value) and "fused kernel" in str(e.value) and "\n" not in str(e.value)
