"""Hybrid Mamba-Transformer models (model.hybrid_layer_pattern): the Mamba-2 layer's parameters and
SSD FLOPs by hand, the sublayer split, stage placement of a pattern, and the one-line errors."""
import pytest

from pipesim import load_scenario
from pipesim.costs.layers import layer_ops
from pipesim.costs.stage import stage_costs
from pipesim.costs.summary import layer_counts, total_params
from pipesim.errors import PipesimError

TINY = dict(num_layers=6, hidden_size=256, num_attention_heads=4, num_kv_heads=2, seq_length=512, vocab_size=1024,
            activation="squared_relu", norm="rmsnorm", position="none", bias=False, tied_embeddings=False,
            dropout=False, ffn_hidden_size=512, hybrid_layer_pattern="M-M*-M", mamba_num_heads=8,
            mamba_head_dim=32, mamba_state_dim=16, mamba_num_groups=2, mamba_chunk_size=64)


def tiny(model=None, **parallel):
    par = {"data": 1, **parallel}
    gpus = par.get("tensor", 1) * par.get("pipeline", 1) * par["data"]
    return load_scenario({"model": {**TINY, **(model or {})}, "system": {"preset": "dgx-h100", "gpus_per_node": gpus},
                          "parallel": par, "training": {"global_batch_size": 4 * par["data"], "attention": "flash"}})


def test_mamba_layer_parameters_by_hand():
    s = tiny()
    h, H, P, N, G, K = 256, 8, 32, 16, 2, 4
    d_inner, conv = H * P, H * P + 2 * G * N
    expected = (h                                   # pre-norm
                + h * (2 * d_inner + 2 * G * N + H)  # in_proj: z, x, B, C, dt
                + conv * K + conv                    # depthwise conv weight and bias
                + 3 * H                              # A_log, D, dt_bias
                + d_inner                            # gated RMSNorm
                + d_inner * h)                       # out_proj
    assert sum(o.params for o in layer_ops(s, "mamba")) == expected


def test_ssd_flops_by_hand():
    s = tiny()
    ssd = next(o for o in layer_ops(s, "mamba") if o.name == "ssd")
    Q, N, P, H, G, chunks = 64, 16, 32, 8, 2, 512 // 64
    per_chunk = G * 2 * Q * Q * N + H * (2 * Q * Q * P + 4 * Q * N * P)
    assert ssd.flops_fwd == chunks * per_chunk and ssd.flops_bwd == 2 * ssd.flops_fwd


def test_ssd_state_passing_is_its_own_memory_pass_unless_measured():
    from dataclasses import replace

    from pipesim.costs.profile import CostProfile, Measurement
    from pipesim.costs.stage import cost_model_for
    s = tiny()
    ssd = next(o for o in layer_ops(s, "mamba") if o.name == "ssd")
    states = (512 // 64) * 8 * 32 * 16          # chunks x heads x head dim x state
    # forward reads the fp32 states and writes bf16 ones; the backward re-runs that in fp32, then
    # reads states and dstates (fp32) and writes both in bf16 (mamba_ssm ssd_combined.py)
    assert ssd.serial_bytes_fwd == states * (4 + 2)
    assert ssd.serial_bytes_bwd == states * (4 + 4) + states * 2 * (4 + 2)
    cm = cost_model_for(s)
    plain = cm.time(ssd, "fwd")
    without = cm.time(replace(ssd, serial_bytes_fwd=0.0), "fwd")
    assert plain.seconds == pytest.approx(without.seconds + cm.memory_time(ssd.serial_bytes_fwd))
    # a measured scan (the emulator's calibration) holds every pass: nothing is added to it
    (key, shape), = ssd.measure_fwd
    prof = CostProfile(device={"kind": "cuda"}, measurements=[Measurement(key, shape, 1e-3, 1e-3, 1e-3, 1)])
    assert cost_model_for(s, profile=prof).time(ssd, "fwd").seconds == pytest.approx(1e-3)


def test_ssd_forward_follows_the_published_mamba_ssm_benchmark():
    """vLLM PR #27299's H100 microbenchmark of mamba_ssm's SSD kernels (benchmarks/kernel_curves.py
    section 4): within 15 % at every length above the wrapper's fixed cost, 10 % on average."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_curves.py"
    spec = importlib.util.spec_from_file_location("kernel_curves", path)
    kc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kc)
    errs = [kc.ssd_tokens_per_s(n) / pub - 1 for n, pub in kc.SSD_VLLM_H100 if n > kc.SSD_FLOOR_TOKENS]
    assert len(errs) == 7 and max(abs(e) for e in errs) < 0.15
    assert sum(abs(e) for e in errs) / len(errs) < 0.10


def test_gated_deltanet_layer_by_hand():
    s = tiny({"hybrid_layer_pattern": "G-G*-M", "gdn_num_key_heads": 2, "gdn_num_value_heads": 4,
              "gdn_key_head_dim": 32, "gdn_value_head_dim": 16})
    h, Hk, Hv, dk, dv, K = 256, 2, 4, 32, 16, 4
    ops = layer_ops(s, "gdn")
    expected = (h + h * (2 * Hk * dk + 2 * Hv * dv + 2 * Hv)      # norm, in_proj: q k v z beta alpha
                + (2 * Hk * dk + Hv * dv) * K + 2 * Hv + dv + Hv * dv * h)   # conv, A_log + dt_bias, norm, out
    assert sum(o.params for o in ops) == expected
    gdn = next(o for o in ops if o.name == "gdn")
    C, chunks = 64, 512 // 64
    per_chunk_head = 2 * C * C * dk * 2 + 2 * C * C * dv * 2 + 2 * C * C * dk + 3 * 2 * C * dk * dv + 2 * C ** 3 / 3
    assert gdn.flops_fwd == pytest.approx(chunks * Hv * per_chunk_head)
    # the state pass runs chunk after chunk: parallel over the heads only, K over every chunk
    assert [g[:4] for g in gdn.gemms_fwd if g[0] == Hv] == [(Hv, dk, dv, 3 * C * chunks)]


def test_sublayers_have_their_own_norm_and_residual():
    s = tiny()
    attn, mlp = [o.name for o in layer_ops(s, "attention")], [o.name for o in layer_ops(s, "mlp")]
    assert attn[0] == "ln1" and attn[-1] == "residual1" and "fc1" not in attn
    assert mlp[0] == "ln2" and mlp[-1] == "residual2" and "qkv" not in mlp
    assert dict(layer_counts(s)) == {"mamba": 3, "mlp": 2, "attention": 1}


def test_pipeline_stages_hold_the_pattern_layers_they_are_given():
    whole = stage_costs(tiny())[0]
    split = stage_costs(tiny(pipeline=2, layers_per_stage=[2, 4]))
    assert sum(c.params for c in split) == pytest.approx(whole.params)
    mamba = sum(o.params for o in layer_ops(tiny(), "mamba"))
    mlp = sum(o.params for o in layer_ops(tiny(), "mlp"))
    emb = 1024 * 256
    assert split[0].params == pytest.approx(emb + mamba + mlp)     # "M-"


def test_total_params_add_up_the_kinds():
    s = tiny()
    kinds = {k: sum(o.params for o in layer_ops(s, k)) for k in ("mamba", "mlp", "attention")}
    extras = 2 * 1024 * 256 + 256                  # embedding, untied head, final norm
    assert total_params(s) == 3 * kinds["mamba"] + 2 * kinds["mlp"] + kinds["attention"] + extras


def test_tensor_parallel_splits_mamba_heads():
    one, two = tiny(), tiny(tensor=2, sequence_parallel=True)
    ssd1 = next(o for o in layer_ops(one, "mamba") if o.name == "ssd")
    ssd2 = next(o for o in layer_ops(two, "mamba") if o.name == "ssd")
    assert ssd2.flops_fwd == pytest.approx(ssd1.flops_fwd / 2)


def test_muon_leaves_the_mamba_in_proj_to_adam():
    s = tiny()
    by_name = {o.name: o for o in layer_ops(s, "mamba")}
    assert by_name["in_proj"].matrices == () and by_name["out_proj"].matrices


@pytest.mark.parametrize("model,parallel,key", [
    ({"hybrid_layer_pattern": "M-M*-D"}, {}, "hybrid_layer_pattern"),
    ({"hybrid_layer_pattern": "G-M*-M", "gdn_num_value_heads": 6, "gdn_num_key_heads": 4}, {},
     "model.gdn_num_value_heads"),
    ({"hybrid_layer_pattern": "M-M*-"}, {}, "hybrid_layer_pattern"),
    ({"hybrid_layer_pattern": "M-M*-E"}, {}, "model.hybrid_layer_pattern"),
    ({"mamba_num_groups": 3}, {}, "model.mamba_num_groups"),
    ({"mamba_num_heads": 6, "mamba_num_groups": 6}, {"tensor": 4}, "parallel.tensor"),
    ({"mtp_layers": 1}, {}, "model.mtp_layers"),
])
def test_bad_hybrid_settings_get_one_line_naming_the_key(model, parallel, key):
    with pytest.raises(PipesimError) as err:
        tiny(model, **parallel)
    assert "\n" not in str(err.value) and key in str(err.value)


def test_emulator_refuses_what_it_does_not_run_of_a_hybrid_model():
    from pipesim.emulator.model import check_supported
    check_supported(tiny())                                            # M, -, *: emulated
    gdn = {"hybrid_layer_pattern": "G-G*-M", "gdn_num_key_heads": 2, "gdn_num_value_heads": 4}
    check_supported(tiny(gdn))                                         # G: on one tensor rank
    with pytest.raises(PipesimError, match="parallel.tensor"):
        check_supported(tiny(gdn, tensor=2, sequence_parallel=True))
    with pytest.raises(PipesimError, match="parallel.context"):
        check_supported(load_scenario({"model": TINY, "system": {"preset": "dgx-h100", "gpus_per_node": 2},
                                       "parallel": {"context": 2},
                                       "training": {"global_batch_size": 4, "attention": "flash"}}))


def test_nemotron_h_simulates_and_the_scan_enters_the_step():
    from pipesim.sim import simulate
    base = {"model": {"preset": "nemotronh-8b"}, "system": {"preset": "dgx-h100", "num_nodes": 1},
            "parallel": {"tensor": 2, "pipeline": 2, "data": 2, "sequence_parallel": True},
            "training": {"global_batch_size": 16, "attention": "flash", "schedule": "1f1b"}}
    s = load_scenario(base)
    rep = simulate(s, trace=False)
    costs = stage_costs(s)
    assert rep.step_time_s >= s.num_microbatches * max(c.forward + c.backward for c in costs)
    # a larger Mamba state makes the scan (and in_proj) longer
    big = dict(base, model={"preset": "nemotronh-8b", "mamba_state_dim": 512})
    assert simulate(load_scenario(big), trace=False).step_time_s > rep.step_time_s


def test_estimate_lists_every_layer_kind_of_a_hybrid_model():
    from pipesim.report.estimate import estimate
    out = estimate(tiny())
    ops = [r["op"] for r in out["rows"]]
    assert {"mamba.ssd", "mlp.fc1", "attention.qkv"} <= set(ops)
    # per layer is the mean over the pattern's 6 layers
    assert out["per_layer"]["flops_fwd"] == pytest.approx(out["layers_total"]["flops_fwd"] / 6)


def test_context_parallel_mamba_runs_the_whole_sequence_over_a_share_of_the_heads():
    one = tiny()
    two = load_scenario({"model": TINY, "system": {"preset": "dgx-h100", "gpus_per_node": 2},
                         "parallel": {"context": 2}, "training": {"global_batch_size": 4, "attention": "flash"}})
    ssd = {n: next(o for o in layer_ops(sc, "mamba") if o.name == "ssd") for n, sc in ((1, one), (2, two))}
    assert ssd[2].flops_fwd == pytest.approx(ssd[1].flops_fwd / 2)
    # the all-to-alls: z x B C dt in, y out, (cp - 1) / cp of each buffer leaves the rank
    from pipesim.costs.layers import shapes_of
    from pipesim.costs.mamba import cp_all_to_all
    sh = shapes_of(two)
    d_inner, d_in = 8 * 32, 2 * 8 * 32 + 2 * 2 * 16 + 8
    seconds, nbytes = cp_all_to_all(two, sh, "mamba")
    assert nbytes == pytest.approx(sh.tokens * (d_in + d_inner) * 2 / 2)
    costs = stage_costs(two)[0]
    assert costs.cp_comm_fwd >= 3 * seconds > 0              # 3 Mamba layers in "M-M*-M", exposed
    assert costs.cp_bytes > 3 * 2 * nbytes                   # + the attention layer's K/V exchange


def test_context_parallel_needs_the_mamba_heads_to_split():
    with pytest.raises(PipesimError, match="parallel.context") as err:
        load_scenario({"model": dict(TINY, mamba_num_heads=6, mamba_num_groups=2),
                       "system": {"preset": "dgx-h100", "gpus_per_node": 4}, "parallel": {"context": 4},
                       "training": {"global_batch_size": 4, "attention": "flash"}})
    assert "\n" not in str(err.value)
