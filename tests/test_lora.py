"""LoRA fine-tuning (training.lora_rank, pipesim/costs/lora.py): frozen base weights, trainable
low-rank adapters, in the ops, the stage costs and the simulated step."""
import pytest

from pipesim import load_scenario
from pipesim.costs.layers import embedding_ops, head_ops, layer_ops
from pipesim.costs.stage import stage_costs
from pipesim.costs.summary import iteration_flops, total_params
from pipesim.errors import ScenarioError
from pipesim.sim import simulate


def scenario(lora=16, targets=("qkv", "proj"), model="llama2-70b", gpus=8, tensor=8, pipeline=1, zero=1,
             sequence_parallel=False, **training):
    data = gpus // (tensor * pipeline)
    tr = {"micro_batch_size": 1, "global_batch_size": 8 * data, "zero_stage": zero, **training}
    if lora:
        tr.update(lora_rank=lora, lora_targets=list(targets))
    return load_scenario({"model": {"preset": model, "seq_length": 4096},
                          "system": {"preset": "dgx-h100", "num_nodes": max(1, gpus // 8)},
                          "parallel": {"tensor": tensor, "pipeline": pipeline, "data": data,
                                       "sequence_parallel": sequence_parallel},
                          "training": tr})


def by_name(ops):
    return {o.name: o for o in ops}


def test_llama2_70b_with_rank_16_on_qkv_and_proj_trains_44_6_million_weights():
    # per layer: A (8192 -> 16) and B (16 -> 8192 + 2 x 1024) beside qkv, A and B (8192 <-> 16)
    # beside proj: 557,056 x 80 layers
    s = scenario()
    assert total_params(s, learning=True) == 44_564_480
    assert total_params(s) == pytest.approx(total_params(scenario(lora=0)) + 44_564_480)


def test_a_frozen_linear_computes_only_its_input_gradient_and_keeps_no_input():
    full, lora = by_name(layer_ops(scenario(lora=0))), by_name(layer_ops(scenario()))
    for name in ("qkv", "proj", "fc1", "fc2"):
        f, fr = full[name], lora[name]
        assert fr.frozen and not f.frozen
        assert fr.flops_fwd == f.flops_fwd and fr.flops_bwd == pytest.approx(f.flops_fwd)   # dX = dY W
        assert all(g[5:] != ("wgrad",) for g in fr.gemms_bwd) and len(fr.gemms_bwd) == 1
        assert fr.bytes_bwd == fr.bytes_fwd and fr.saved_bytes == 0.0 and fr.dgrad_fraction == 1.0
    # the adapters keep the targets' inputs (proj's is the attention's output, kept already)
    assert lora["lora_qkv"].saved_bytes > full["qkv"].saved_bytes
    assert lora["lora_proj"].saved_bytes < lora["lora_qkv"].saved_bytes
    assert "lora_fc1" not in lora and "lora_fc2" not in lora
    assert not lora["lora_qkv"].frozen and any(g[5:] == ("wgrad",) for g in lora["lora_qkv"].gemms_bwd)


def test_the_embedding_runs_no_backward_and_the_head_only_its_input_gradient():
    emb, head = by_name(embedding_ops(scenario())), by_name(head_ops(scenario()))
    assert emb["embedding"].frozen and emb["embedding"].flops_bwd == 0 and emb["embedding"].bytes_bwd == 0
    full = by_name(head_ops(scenario(lora=0)))["lm_head"]
    assert head["lm_head"].flops_bwd == pytest.approx(full.flops_bwd / 2)


def test_frozen_weights_hold_memory_but_no_gradients_or_optimizer_states():
    full, lora = stage_costs(scenario(lora=0))[0], stage_costs(scenario())[0]
    assert lora.static.weights == pytest.approx(full.static.weights + 44_564_480 / 8 * 2, rel=1e-3)
    assert lora.static.gradients < full.static.gradients / 1000
    assert lora.static.optimizer < full.static.optimizer / 1000
    assert lora.grad_bytes == pytest.approx(lora.trainable_params * 2)
    assert full.trainable_params is None and lora.trainable_params < lora.params / 1000
    assert lora.activation_bytes < full.activation_bytes       # fc1 and fc2 keep no input
    assert lora.optimizer_step < full.optimizer_step / 100


def test_zero3_shards_the_frozen_weights_over_the_data_group():
    lora = stage_costs(scenario(gpus=16, tensor=8, zero=3))[0]
    one = stage_costs(scenario(gpus=8, tensor=8, zero=3))[0]
    assert lora.static.weights == pytest.approx(one.static.weights / 2, rel=1e-3)


def test_a_lora_step_is_faster_and_counts_fewer_model_flops():
    full, lora = scenario(lora=0, gpus=16, tensor=8, pipeline=2), scenario(gpus=16, tensor=8, pipeline=2)
    assert simulate(lora, trace=False).step_time_s < simulate(full, trace=False).step_time_s
    # GEMMs: forward and input gradient (4 of 6 passes' FLOPs); attention keeps its backward
    assert 0.66 < iteration_flops(lora) / iteration_flops(full) < 0.75


def test_adapters_beside_tensor_parallel_linears_run_megatron_bridges_collectives():
    ops = by_name(layer_ops(scenario(targets=("qkv", "proj", "fc1", "fc2"))))
    assert [c.kind for c in ops["lora_qkv"].comm_fwd] == ["all_gather"]
    assert [c.kind for c in ops["lora_qkv"].comm_bwd] == ["all_reduce"]
    assert [c.kind for c in ops["lora_proj"].comm_fwd] == ["all_reduce", "all_gather"]
    assert [c.kind for c in ops["lora_fc2"].comm_bwd] == ["all_reduce"]
    alone = by_name(layer_ops(scenario(tensor=1, gpus=8)))
    assert not alone["lora_qkv"].comm_fwd and not alone["lora_proj"].comm_bwd


def test_a_frozen_tied_embedding_exchanges_no_gradient_between_first_and_last_stage():
    s = scenario(model="gpt2-small", tensor=1, gpus=8, pipeline=2)
    full = scenario(lora=0, model="gpt2-small", tensor=1, gpus=8, pipeline=2)
    assert "EMBED_GRAD_AR" in dict(stage_costs(full)[0].step_ops)
    assert "EMBED_GRAD_AR" not in dict(stage_costs(s)[0].step_ops)


@pytest.mark.parametrize("training, key", [
    ({"lora_rank": -1}, "lora_rank"),
    ({"lora_rank": 16, "lora_targets": []}, "lora_targets"),
    ({"lora_rank": 16, "lora_targets": ["gate"]}, "lora_targets"),
    ({"lora_rank": 100000}, "lora_rank"),
    ({"lora_rank": 16, "optimizer": "muon"}, "lora_rank"),
])
def test_bad_lora_settings_get_one_line_errors_naming_the_key(training, key):
    with pytest.raises(ScenarioError, match=key) as e:
        load_scenario({"model": {"preset": "llama2-7b"}, "system": {"preset": "dgx-h100", "num_nodes": 1},
                       "parallel": {"tensor": 1, "pipeline": 1, "data": 8},
                       "training": {"micro_batch_size": 1, "global_batch_size": 8, **training}})
    assert "\n" not in str(e.value)


def moe(lora=16, targets=("qkv", "proj"), expert_tensor=1):
    tr = {"micro_batch_size": 1, "global_batch_size": 16, "zero_stage": 1}
    if lora:
        tr.update(lora_rank=lora, lora_targets=list(targets))
    return load_scenario({"model": {"preset": "qwen3-30b-a3b", "seq_length": 4096},
                          "system": {"preset": "dgx-h100", "num_nodes": 2},
                          "parallel": {"tensor": 1, "pipeline": 1, "data": 16, "expert": 8 // expert_tensor,
                                       "expert_tensor": expert_tensor}, "training": tr})


def test_lora_on_a_mixture_of_experts_model_freezes_the_experts_and_the_router():
    full, lora = stage_costs(moe(lora=0))[0], stage_costs(moe())[0]
    ops = by_name(layer_ops(moe(), True))
    assert ops["router"].frozen and all(o.frozen for n, o in ops.items() if n.startswith("expert_") and o.params)
    expert = ops["expert_fc1"]
    assert all(g[5:] != ("wgrad",) for g in expert.gemms_bwd)
    # the profile keeps one input-gradient lookup per expert, not the first expert's alone
    assert len(expert.measure_bwd) == len(expert.measure_fwd)
    # every expert weight held, none with a gradient or optimizer state; the adapters alone learn
    assert lora.static.weights == pytest.approx(full.static.weights, rel=0.01)
    assert lora.static.optimizer < full.static.optimizer / 1000 and lora.grad_bytes < full.grad_bytes / 1000
    assert lora.trainable_params == total_params(moe(), learning=True) == 48 * (16 * (2048 + 5120) + 16 * (4096 + 2048))
    assert simulate(moe(), trace=False).step_time_s < simulate(moe(lora=0), trace=False).step_time_s


def test_an_adapter_beside_the_experts_is_shared_by_the_ranks_local_experts():
    # Megatron-Bridge's share_expert_adapters: one A and one B over every row the rank's 16 local
    # experts received, an expert weight (sharded by EP, reduced over expert-data parallelism)
    s = moe(targets=("qkv", "proj", "fc1", "fc2"))
    ops = by_name(layer_ops(s, True))
    fc1, fc2 = ops["expert_lora_fc1"], ops["expert_lora_fc2"]
    assert fc1.params == 16 * (2048 + 2 * 768) and fc2.params == 16 * (768 + 2048)
    rows = ops["expert_fc1"].matrices[0][0] * ops["expert_fc1"].gemms_fwd[0][1]
    assert fc1.gemms_fwd[0][1] == rows and not fc1.comm_fwd and not fc1.frozen
    attention_only, with_experts = stage_costs(moe())[0], stage_costs(s)[0]
    assert with_experts.expert_params - attention_only.expert_params == pytest.approx(48 * (fc1.params + fc2.params))
    assert with_experts.grad_bytes > attention_only.grad_bytes
    with pytest.raises(ScenarioError, match="training.lora_targets.*expert tensor parallelism"):
        moe(targets=("qkv", "fc1"), expert_tensor=2)


def test_adapter_dropout_keeps_a_masked_copy_of_each_input():
    plain, dropped = by_name(layer_ops(scenario())), by_name(layer_ops(scenario(lora_dropout=0.1)))
    for name in ("lora_qkv", "lora_proj"):
        assert dropped[name].bytes_fwd > plain[name].bytes_fwd and dropped[name].bytes_bwd > plain[name].bytes_bwd
    # proj's input was the attention's output, kept already: with dropout its masked copy is new
    assert dropped["lora_proj"].saved_bytes > 2 * plain["lora_proj"].saved_bytes
    assert dropped["lora_qkv"].saved_bytes == pytest.approx(plain["lora_qkv"].saved_bytes * 1.5, rel=0.01)


def test_lora_a2a_returns_the_row_adapter_to_the_sequence_split_by_one_all_to_all():
    gather = by_name(layer_ops(scenario(sequence_parallel=True)))["lora_proj"]
    a2a = by_name(layer_ops(scenario(sequence_parallel=True, lora_a2a=True)))["lora_proj"]
    assert [c.kind for c in gather.comm_fwd] == ["all_reduce", "all_gather"]
    assert [c.kind for c in a2a.comm_fwd] == ["all_reduce", "all_to_all"]
    assert a2a.comm_fwd[1].bytes == pytest.approx(gather.comm_fwd[1].bytes / 8)


def test_a_frozen_fp8_stored_base_is_never_recast():
    # MLPerf's llama2_70b_lora builds the base under te.fp8_model_init: FP8 weights that do not change
    bf16_kept = stage_costs(scenario(tensor=8, precision="fp8"))[0]
    fp8_kept = stage_costs(scenario(tensor=8, precision="fp8", fp8_param_gather=True))[0]
    assert "FP8_WEIGHT_CAST" in dict(bf16_kept.step_ops) and "FP8_WEIGHT_CAST" not in dict(fp8_kept.step_ops)
    assert fp8_kept.static.weights < 0.8 * bf16_kept.static.weights


def test_fp8_activation_input_halves_the_swiglu_input_kept():
    plain = by_name(layer_ops(scenario(lora=0)))["act"]
    fp8 = by_name(layer_ops(scenario(lora=0, fp8_activation_input=True)))["act"]
    assert fp8.saved_bytes == pytest.approx(plain.saved_bytes / 2)
    assert fp8.bytes_fwd > plain.bytes_fwd and fp8.bytes_bwd > plain.bytes_bwd
    with pytest.raises(ScenarioError, match="training.fp8_activation_input"):
        scenario(lora=0, model="gpt2-small", tensor=1, fp8_activation_input=True)


@pytest.mark.parametrize("key", ["lora_dropout", "lora_a2a"])
def test_adapter_settings_without_lora_are_refused(key):
    with pytest.raises(ScenarioError, match=f"training.{key}"):
        scenario(lora=0, **{key: 0.1 if key == "lora_dropout" else True})


@pytest.mark.parametrize("layout", [dict(tensor=8), dict(tensor=2, gpus=8, pipeline=2, zero=3)])
def test_a_larger_rank_or_one_more_target_never_shortens_the_step(layout):
    steps = [simulate(scenario(lora=r, **layout), trace=False).step_time_s for r in (4, 16, 64, 256)]
    assert steps == sorted(steps)
    fewer = simulate(scenario(targets=("qkv",), **layout), trace=False).step_time_s
    more = simulate(scenario(targets=("qkv", "fc2"), **layout), trace=False).step_time_s
    assert fewer <= more


def mla(tensor=1, targets=("q_down", "q_up", "kv_down", "kv_up", "proj"), **parallel):
    return load_scenario({"model": {"preset": "deepseek-v3", "seq_length": 4096, "mtp_layers": 0, "num_layers": 4,
                                    "num_experts": 0},
                          "system": {"preset": "dgx-h100", "num_nodes": 1},
                          "parallel": {"tensor": tensor, "pipeline": 1, "data": 8 // tensor, **parallel},
                          "training": {"micro_batch_size": 1, "global_batch_size": 8 // tensor, "lora_rank": 16,
                                       "lora_targets": list(targets)}})


def test_latent_attention_takes_adapters_beside_its_own_linears():
    ops = by_name(layer_ops(mla()))
    assert {"lora_q_down", "lora_q_up", "lora_kv_down", "lora_kv_up", "lora_proj"} <= set(ops)
    assert all(ops[n].frozen for n in ("q_down", "q_up", "kv_down", "kv_up", "proj"))
    # q_down's and kv_down's adapters read the same normed input: kept once
    mid = 4096 * 16 * 2
    assert ops["lora_q_down"].saved_bytes == pytest.approx(4096 * 7168 * 2 + mid)
    assert ops["lora_kv_down"].saved_bytes == pytest.approx(mid)
    alone = by_name(layer_ops(mla(targets=("kv_down",))))
    assert alone["lora_kv_down"].saved_bytes == pytest.approx(4096 * 7168 * 2 + mid)


def test_a_duplicated_down_projections_adapter_gathers_both_outputs_on_the_ranks_tokens():
    ops = by_name(layer_ops(mla(tensor=2, sequence_parallel=True)))
    down, up = ops["lora_q_down"], ops["lora_q_up"]
    assert [c.kind for c in down.comm_fwd] == ["all_gather", "all_gather"]
    # on the rank's 2,048 tokens of the sequence shard, against the up-projection's gathered 4,096
    assert down.gemms_fwd[0][1] == 2048 and up.gemms_fwd[0][1] == 4096


def test_a_target_the_model_does_not_have_is_named():
    with pytest.raises(ScenarioError, match="training.lora_targets: qkv: not a linear"):
        mla(targets=("qkv", "proj"))
    with pytest.raises(ScenarioError, match="training.lora_targets: q_down: not a linear"):
        scenario(targets=("q_down",))


def test_a_hybrid_models_mixers_take_adapters_beside_in_proj_and_out_proj():
    s = load_scenario({"model": {"preset": "nemotronh-8b", "seq_length": 4096},
                       "system": {"preset": "dgx-h100", "num_nodes": 1},
                       "parallel": {"tensor": 2, "pipeline": 1, "data": 4},
                       "training": {"micro_batch_size": 1, "global_batch_size": 8, "lora_rank": 8,
                                    "lora_targets": ["in_proj", "out_proj", "qkv"]}})
    mamba = by_name(layer_ops(s, "mamba"))
    assert {"lora_in_proj", "lora_out_proj"} <= set(mamba) and mamba["in_proj"].frozen and mamba["out_proj"].frozen
    # every weight of the mixer (conv, norm, A, D) frozen; only the adapters learn
    assert all(o.frozen for n, o in mamba.items() if o.params and not n.startswith("lora_"))
    # A beside the column-parallel in_proj: its 8 / 2 rows on the hidden size; B on in_proj's output rows
    assert mamba["lora_in_proj"].gemms_fwd[0][2:4] == (4, 4096)
    assert mamba["lora_in_proj"].gemms_fwd[1][2] == mamba["in_proj"].gemms_fwd[0][2]
    assert "lora_qkv" in by_name(layer_ops(s, "attention"))
    assert simulate(s, trace=False).step_time_s > 0


def test_sp_regather_keeps_the_shard_and_gathers_it_again_in_the_backward():
    kept = by_name(layer_ops(scenario(sequence_parallel=True)))["lora_qkv"]
    again = by_name(layer_ops(scenario(sequence_parallel=True, lora_sp_regather=True)))["lora_qkv"]
    mid = 4096 * 16 * 2
    assert kept.saved_bytes - mid == pytest.approx(8 * (again.saved_bytes - mid))     # TP 8
    assert [c.kind for c in again.comm_bwd] == [c.kind for c in kept.comm_bwd] + ["all_gather"]
    assert stage_costs(scenario(sequence_parallel=True, lora_sp_regather=True))[0].activation_bytes < \
        stage_costs(scenario(sequence_parallel=True))[0].activation_bytes
    with pytest.raises(ScenarioError, match="training.lora_sp_regather"):
        scenario(lora_sp_regather=True)                 # no sequence parallelism to re-gather
    with pytest.raises(ScenarioError, match="training.lora_sp_regather"):
        scenario(sequence_parallel=True, lora_sp_regather=True, recompute="full")


def test_a_lora_step_out_of_memory_is_offered_the_input_regather():
    from pipesim.report.suggest import memory_candidates
    titles = [c[0] for c in memory_candidates(scenario(sequence_parallel=True))]
    assert "LoRA input re-gather" in titles
    for s in (scenario(), scenario(lora=0, sequence_parallel=True),
              scenario(sequence_parallel=True, lora_sp_regather=True)):
        assert "LoRA input re-gather" not in [c[0] for c in memory_candidates(s)]
