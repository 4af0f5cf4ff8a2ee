"""What a pass holds beyond its kept activations (pipesim/costs/workspace.py) and the PyTorch-stack
memory terms around it: the loss's logit copies, FSDP2's root unit, FSDP2's unsharded gradients
under pipelining, DTensor TP's gathered column inputs."""
from collections import Counter

import pytest

import pipesim
from pipesim.costs import stage_costs
from pipesim.costs.layers import logits_per_gpu, loss_kernel, shapes_of
from pipesim.costs.workspace import Workspace, ce_working

from tests._sim_helpers import tiny


def _one_stage(ce: str, **extra_training):
    return tiny(P=1, M=1, extra_training={"cross_entropy": ce, **extra_training})


@pytest.mark.parametrize("ce, fwd, bwd", [("torch", 6, 8), ("torch_16bit", 2, 4), ("torch_compiled", 0, 2), ("megatron", 2, 2),
                                          ("megatron_fused", 2, 2), ("te", 0, 0), ("flash_attn", 0, 2)])
def test_the_loss_holds_its_implementations_logit_copies(ce, fwd, bwd):
    s = _one_stage(ce)
    logits = logits_per_gpu(shapes_of(s))
    assert logits == 32 * 128                      # one micro-batch of 32 tokens, a 128-word vocabulary
    ws = stage_costs(s)[-1].workspace
    assert (ws.loss_fwd, ws.loss_bwd) == (fwd * logits, bwd * logits)
    assert (ws.held_fwd, ws.held_bwd) == (0.0, 0.0)   # no FSDP2


def test_pytorch_cross_entropy_over_tensor_parallel_logits_is_loss_parallel():
    s = tiny(P=1, M=1, tensor=2, extra_training={"cross_entropy": "torch"},
             extra_parallel={"sequence_parallel": True})
    assert loss_kernel(s) == "torch_loss_parallel" and ce_working("torch_loss_parallel", 2) == (10, 12)
    ws = stage_costs(s)[-1].workspace
    assert ws.loss_bwd == 12 * 32 * 128 / 2        # the vocabulary split over the tensor group
    assert loss_kernel(_one_stage("torch")) == "torch"


def test_fp32_logits_have_no_16_bit_copy_and_need_no_cast():
    assert ce_working("torch", 4) == ce_working("torch_16bit", 4) == (4, 8)
    assert ce_working("megatron", 4) == (0, 0) and ce_working("torch_loss_parallel", 4) == (8, 12)
    s = _one_stage("torch", precision="fp32")
    assert stage_costs(s)[-1].workspace.loss_fwd == 4 * 32 * 128
    with pytest.raises(ValueError):
        ce_working("liger", 2)


def test_the_backward_peak_is_the_larger_of_the_loss_and_a_recomputed_layer():
    ws = Workspace(loss_fwd=5.0, loss_bwd=10.0, held_fwd=2.0, held_bwd=3.0)
    assert ws.forward() == 7.0
    assert ws.backward(4.0) == 3.0 + 6.0           # the loss runs first, then the recomputed layers
    assert ws.backward(20.0) == 3.0


def test_the_simulated_peak_holds_the_backwards_loss_copies():
    torch_ce, te = (pipesim.simulate(_one_stage(ce)) for ce in ("torch", "te"))
    logits = 32 * 128
    rank = torch_ce.data["ranks"][0]
    assert rank["peak_memory_by_category"]["workspace"] == 8 * logits
    assert te.data["ranks"][0]["peak_memory_by_category"]["workspace"] == 0.0
    # kept: an fp32 log-softmax (4) against the 16-bit logits TE works in place (2); plus 8 held
    assert torch_ce.peak_memory_bytes - te.peak_memory_bytes == pytest.approx((4 - 2 + 8) * logits)


def _fsdp2(P=1, M=1, **training):
    # a Llama-like model: untied output layer, RMSNorm, rotary positions (no position table)
    return tiny(P=P, M=M, data=4, extra_training={"zero_stage": 3, "zero3_collectives": "fsdp2",
                                                  "fsdp2_ends_in_root": True, "grad_reduce_in_fp32": True,
                                                  "cross_entropy": "te", **training},
                extra_model={"tied_embeddings": False, "norm": "rmsnorm", "position": "rotary"})


def test_fsdp2s_root_unit_stays_gathered_through_each_pass():
    s = _fsdp2()
    c = stage_costs(s)[0]
    emb = 128 * 64                                  # vocabulary x hidden
    head = 128 * 64 + 64                            # the output layer and the final norm
    gathered = (emb + head) * 2 * (1 - 1 / 4)       # BF16 copies beyond the rank's quarter
    assert c.workspace.held_fwd == pytest.approx(gathered)
    assert c.workspace.held_bwd == pytest.approx(gathered + head * 2)   # + the head's unsharded gradient
    # kept gathered (pipelining's reshard_after_forward false: resident weights), wrapped on their own
    # (torchtitan since July 2025, NeMo AutoModel) or not FSDP2: nothing
    assert stage_costs(_fsdp2(reshard_after_forward=False))[0].workspace.held_fwd == 0.0
    assert stage_costs(_fsdp2(fsdp2_ends_in_root=False))[0].workspace.held_fwd == 0.0
    layer = tiny(P=1, M=1, data=4, extra_training={"zero_stage": 3, "zero3_collectives": "layer"})
    assert stage_costs(layer)[0].workspace.held_fwd == 0.0


def test_fsdp2_under_pipelining_accumulates_unsharded_gradients_and_syncs_once():
    piped = _fsdp2(P=2, M=4, reshard_after_forward=False)
    assert piped.fsdp2_deferred_grad_sync
    for c in stage_costs(piped):
        assert c.static.gradients == pytest.approx(4 * c.params)       # fp32, every parameter of the stage
    single = _fsdp2(P=2, M=1, reshard_after_forward=False)
    assert not single.fsdp2_deferred_grad_sync
    assert all(c.static.gradients == pytest.approx(4 * c.params / 4) for c in stage_costs(single))
    # one gather for the step (the first forward) instead of one per micro-batch
    layer = tiny(P=2, M=4, data=4, extra_training={"zero_stage": 3, "zero3_collectives": "layer",
                                                   "reshard_after_forward": False})
    count = {name: Counter(e.kind for e in pipesim.simulate(sc).events if e.rank == 0 and e.stream == "dp")
             for name, sc in (("fsdp2", piped), ("layer", layer))}
    assert count["fsdp2"]["ZERO_GATHER"] == 1 and count["layer"]["ZERO_GATHER"] == 4
    assert count["fsdp2"]["DP"] < count["layer"]["DP"]          # reduce-scattered after the last backward only


def test_dtensor_tp_keeps_each_column_linears_gathered_input():
    def qkv_saved(keep: bool, sp: bool = True) -> float:
        s = tiny(P=1, M=1, tensor=2, extra_parallel={"sequence_parallel": sp},
                 extra_training={"tp_keeps_gathered_input": keep})
        from pipesim.costs.layers import layer_ops
        return next(o.saved_bytes for o in layer_ops(s) if o.name == "qkv")
    tokens, hidden = 32, 64
    assert qkv_saved(False) == tokens / 2 * hidden * 2      # Megatron: its sequence shard
    assert qkv_saved(True) == tokens * hidden * 2           # DTensor: the all-gathered input
    assert qkv_saved(False, sp=False) == tokens * hidden * 2    # without SP the input is whole anyway


@pytest.mark.parametrize("training, parallel, key", [
    ({"fsdp2_ends_in_root": True}, {}, "training.fsdp2_ends_in_root"),
    ({"fsdp2_ends_in_root": True, "zero_stage": 3, "zero3_collectives": "layer"}, {}, "training.fsdp2_ends_in_root"),
    ({"tp_keeps_gathered_input": True}, {"sequence_parallel": False}, "training.tp_keeps_gathered_input"),
    ({"cross_entropy": "torch_fp32"}, {}, "training.cross_entropy")])
def test_the_new_keys_refuse_what_they_cannot_mean_in_one_line(training, parallel, key):
    from pipesim.errors import ScenarioError
    with pytest.raises(ScenarioError, match=key) as e:
        tiny(P=1, M=1, tensor=2, data=2, extra_training=training, extra_parallel=parallel)
    assert "\n" not in str(e.value)
