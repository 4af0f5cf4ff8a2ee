"""The Megatron-Bridge held-out families (bridge2511, bridge2604, bridge2606, bridge2608): the converter
maps the published rows as stated (no simulation)."""
import re

import pytest

from pipesim.errors import ScenarioError
from pipesim.whatif.validation import case_scenario, load_cases


def _cases():
    return {c.id: c for c in load_cases() if c.suite == "bridge2511"}


def test_one_row_per_system_maps_as_published():
    cases = _cases()
    h100 = case_scenario(cases["bridge2511-h100-llama3-8b"])         # FSDP 8, FP8-CS, MBS 1
    assert h100["system"] == {"preset": "dgx-h100", "num_nodes": 1}
    assert h100["training"]["zero_stage"] == 3 and h100["parallel"]["data"] == 8
    assert (h100["training"]["precision"], h100["training"]["fp8_recipe"]) == ("fp8", "tensorwise")
    b200 = case_scenario(cases["bridge2511-b200-llama3.1-405b-mx"])   # TP4 PP8 CP2 VP8, 128 GPUs
    assert b200["system"] == {"preset": "dgx-b200", "num_nodes": 16}
    assert b200["training"]["fp8_recipe"] == "mxfp8" and b200["training"]["zero_stage"] == 1
    assert b200["parallel"]["context"] == 2 and b200["parallel"]["data"] == 2
    assert sum(b200["parallel"]["layers_per_stage"]) == 126 and len(b200["parallel"]["layers_per_stage"]) == 64
    gb200 = case_scenario(cases["bridge2511-gb200-qwen3-235b-a22b-bf16"])  # EP 32, 256 GPUs
    assert gb200["system"] == {"preset": "gb200-nvl72", "num_nodes": 64, "nvlink_domain": 64}
    assert gb200["training"]["precision"] == "bf16" and "fp8_recipe" not in gb200["training"]
    assert gb200["parallel"]["expert"] == 32 and gb200["training"]["moe_routing"] == "balanced"
    assert cases["bridge2511-gb200-llama3-70b"].target == 4312.0


def test_unknown_system_and_unexpressible_rows_are_one_line_errors():
    case = _cases()["bridge2511-h100-llama3-70b"]
    case.raw = dict(case.raw, hardware={"system": "DGX-X999", "num_gpus": 64})
    with pytest.raises(ScenarioError, match=r"hardware.system 'DGX-X999' has no system preset") as e:
        case_scenario(case)
    assert "\n" not in str(e.value)
    case.raw = dict(case.raw, hardware={"system": "DGX-H100", "num_gpus": 64}, precision="FP6")
    with pytest.raises(ScenarioError, match="FP6"):
        case_scenario(case)
    case.raw = dict(case.raw, hardware={"system": "DGX-B200", "num_gpus": 64}, precision="NVFP4")
    nvfp4 = case_scenario(case)["training"]
    assert nvfp4["fp8_recipe"] == "nvfp4" and not nvfp4["fp8_param_gather"]


def test_deepseek_with_mtp_maps_to_one_mtp_depth():
    mtp = case_scenario(_cases()["bridge2511-b200-deepseekv3-mtp-mx"])
    assert mtp["model"]["preset"] == "deepseek-v3" and mtp["model"]["mtp_layers"] == 1
    assert case_scenario(_cases()["bridge2511-gb200-deepseekv3-bf16"])["model"]["mtp_layers"] == 0


def test_26x_deepseek_trains_with_mtp_in_the_releases_pipeline_layout():
    """The 26.x tables write plain "DeepSeekV3"; the recipe under every release's config trains one MTP
    depth and lays the pipeline out as the recipe's map (or the config's pp_layout) says: the last
    chunk holds 1 layer, the MTP block and the loss (the even split gave it 2 layers beside them)."""
    from pipesim.scenario.load import load_scenario
    cases = {c.id: c for c in load_cases()}
    for cid, chunks in [("bridge2608-gb300-deepseekv3-mxfp8", 16), ("bridge2606-gb200-deepseekv3-mxfp8", 16),
                        ("bridge2604-b300-deepseekv3-mxfp8", 8)]:
        sc = case_scenario(cases[cid])
        assert sc["model"]["mtp_layers"] == 1
        lps = load_scenario(sc).parallel.layers_per_stage
        assert len(lps) == chunks and sum(lps) == 61
        assert (lps[0], lps[-1]) == ((4, 1) if chunks == 16 else (8, 5))
    for cid, last in [("bridge2511-b200-deepseekv3-mtp-mx", "tmL"), ("bridge2511-gb200-deepseekv3-bf16", "tL")]:
        assert case_scenario(cases[cid])["parallel"]["layers_per_stage"] == "Et*4|(t*4|)*14" + last   # v0.2.0's map
    kimi = case_scenario(cases["bridge2606-gb300-kimi-k2-mxfp8"])            # its recipe's map, no MTP
    assert kimi["model"]["mtp_layers"] == 0 and load_scenario(kimi).parallel.layers_per_stage == (4,) * 15 + (1,)
    assert kimi["training"]["fp8_param_gather"] is False       # Muon + MXFP8: the configs turn it off


def test_rows_whose_script_layout_matches_take_its_recompute_dispatch_and_overlap():
    cases = _cases()
    ds = case_scenario(cases["bridge2511-gb200-deepseekv3-bf16"])["training"]
    assert ds["recompute"] == "selective" and ds["recompute_modules"] == ["mla_up_proj"]
    assert ds["moe_dispatcher"] == "hybridep"            # v0.2.0: only DeepSeek-V3 on H100 named deepep
    assert case_scenario(cases["bridge2511-h100-qwen3-235b-a22b"])["training"]["moe_a2a_overlap"] is True
    other = case_scenario(cases["bridge2511-gb200-deepseekv3-mx"])["training"]     # PP 8 here, 4 in the script
    assert other["recompute"] == "none" and other["moe_dispatcher"] == "alltoall"
    # the DeepSeek-V3 recipe's BF16 Adam moments hold for every DeepSeek-V3 row, and only for them
    assert ds["optimizer_state_dtype"] == other["optimizer_state_dtype"] == "bf16"
    qwen = case_scenario(cases["bridge2511-h100-qwen3-235b-a22b"])["training"]
    assert qwen.get("optimizer_state_dtype", "fp32") == "fp32"


def test_the_2604_tables_map_with_the_same_converter():
    cases = {c.id: c for c in load_cases() if c.suite == "bridge2604"}
    assert len(cases) == 47                                          # every row of the 26.04.01 tables
    kimi = case_scenario(cases["bridge2604-gb300-kimi-k2-mxfp8"])   # footnote: trained with Muon
    assert kimi["training"]["optimizer"] == "muon" and kimi["system"]["preset"] == "gb300-nvl72"
    assert kimi["system"]["nvlink_domain"] == 64 and kimi["parallel"]["expert"] == 64
    nano = case_scenario(cases["bridge2604-b300-nemotron-3-nano-mxfp8"])   # vp and ep "n/a" -> 1 / 8
    assert nano["system"] == {"preset": "dgx-b300", "num_nodes": 1} and nano["parallel"]["virtual_stages"] == 1
    h100 = case_scenario(cases["bridge2604-h100-llama3-70b-fp8"])   # "FP8" = current scaling
    assert (h100["training"]["fp8_recipe"], h100["parallel"].get("expert")) == ("tensorwise", None)
    # Nemotron 3 Super: two passes through one shared "*E" MTP block in BF16 (its recipe); the NVFP4
    # rows take its per-module recipe (te_quant.cfg) and last 14 layers in BF16
    sup = case_scenario(cases["bridge2604-b200-nemotron-3-super-mxfp8"])
    assert sup["model"]["preset"] == "nemotron-3-super" and sup["model"]["mtp_layers"] == 2
    assert sup["model"]["mtp_repeated_layer"] is True and sup["model"]["mtp_hybrid_pattern"] == "*E"
    assert sup["training"]["recompute_modules"] == ["moe_act", "layernorm"] and sup["training"]["bf16_mtp"]
    fp4 = case_scenario(cases["bridge2604-b200-nemotron-3-super-nvfp4"])["training"]
    assert (fp4["fp8_recipe"], fp4["bf16_layers_end"], fp4["mxfp8_gemms"]) == ("nvfp4", 14, ["ssm_out_proj"])
    assert fp4["bf16_gemms"] == ["attention", "moe_latent"] and fp4["fp8_param_gather"] is False
    # 26.04's NVFP4 recipe stores and gathers the weights in FP4 (25.11's kept BF16 ones)
    assert case_scenario(cases["bridge2604-gb300-llama3-70b-nvfp4"])["training"]["fp8_param_gather"] is True


def test_2604_rows_take_their_release_configs_settings():
    cases = {c.id: c for c in load_cases() if c.suite == "bridge2604"}
    b200 = case_scenario(cases["bridge2604-b200-deepseekv3-mxfp8"])["training"]    # DEEPSEEK_V3 ..._B200_FP8_MX_V2
    assert (b200["moe_dispatcher"], b200["moe_a2a_overlap"]) == ("deepep", True)    # the one config naming deepep
    # every other flex row of v0.4.2 names hybridep
    assert {case_scenario(cases[c])["training"].get("moe_dispatcher") for c in cases
            if "deepseekv3" not in c or "b200" not in c} <= {None, "alltoall", "hybridep"}
    assert b200["recompute"] == "selective" and b200["recompute_modules"] == ["mla_up_proj", "mlp"]
    fsdp = case_scenario(cases["bridge2604-gb300-llama3-70b-fp8"])["training"]     # Megatron-FSDP, 20 offloaded
    assert (fsdp["zero_stage"], fsdp["zero3_collectives"], fsdp["offload_activation_layers"]) == (3, "layer", 20)
    plain = case_scenario(cases["bridge2604-gb300-gpt-oss-120b-bf16"])["training"]  # the config sets nothing more
    assert plain["moe_dispatcher"] == "alltoall" and plain["recompute"] == "none"


def test_the_2606_and_2608_tables_load_convert_or_are_skipped_with_their_reason():
    from pipesim import load_scenario
    from pipesim.whatif.validation_bridge import BRIDGE_NO_PRESET
    every = [c.id for c in load_cases()]
    assert len(every) == len(set(every))                             # ids unique across all families
    for suite, rows, skipped in (("bridge2606", 31, set()),
                                 ("bridge2608", 18, {"DeepSeekV4 Flash", "Nemotron_3_5_Lightning", "Nemotron_3_Ultra"})):
        cases = [c for c in load_cases() if c.suite == suite]
        assert len(cases) == rows                                    # every pre-training row of the tables
        seen = set()
        for c in cases:
            name = c.raw["model"]["name"]
            if name in BRIDGE_NO_PRESET:
                with pytest.raises(ScenarioError, match=re.escape(f"{c.id}: skipped: {BRIDGE_NO_PRESET[name]}")):
                    case_scenario(c)
                seen.add(name)
            else:
                s = load_scenario(case_scenario(c))
                assert s.num_gpus == c.raw["hardware"]["num_gpus"] and s.training.global_batch_size == \
                    c.raw["parallel"]["global_batch"], c.id
        assert seen == skipped
    two = {c.id: c for c in load_cases() if c.suite == "bridge2606"}   # two GB300 DeepSeekV3 rows: GBS 4096, 15360
    assert two["bridge2606-gb300-deepseekv3-mxfp8-gbs15360"].target == 6422.0
    assert case_scenario(two["bridge2606-gb300-deepseekv3-mxfp8"])["training"]["global_batch_size"] == 4096


def test_validate_lists_the_rows_without_a_preset_as_skipped():
    from pipesim.whatif.validation import run_suite
    res = run_suite(["bridge2608"], evaluator=lambda s, mode: {"step_time_s": 1.0, "oom": False})["bridge2608"]
    notes = {r.case.id: r.note for r in res if r.error_pct is None}
    assert set(notes) == {"bridge2608-gb300-deepseekv4-flash-mxfp8", "bridge2608-gb200-deepseekv4-flash-mxfp8",
                          "bridge2608-gb200-nemotron-3-5-lightning-mxfp8", "bridge2608-gb300-nemotron-3-ultra-mxfp8",
                          "bridge2608-gb200-nemotron-3-ultra-mxfp8"}
    assert "compressed sparse attention" in notes["bridge2608-gb300-deepseekv4-flash-mxfp8"]


def test_2606_and_2608_rows_take_their_release_configs_settings():
    from pipesim.whatif import validation_bridge_2606, validation_bridge_2608
    cases = {c.id: c for c in load_cases() if c.suite in ("bridge2606", "bridge2608")}
    for prefix, rows in (("bridge2606-", validation_bridge_2606.ROWS), ("bridge2608-", validation_bridge_2608.ROWS)):
        assert all(prefix + row in cases for row in rows)              # every entry names a published row
    ds = case_scenario(cases["bridge2606-gb200-deepseekv3-mxfp8"])["training"]   # ..._GB200_FP8_MX_V2 (v0.5.1)
    assert (ds["moe_dispatcher"], ds["moe_a2a_overlap"], ds["moe_shared_expert_overlap"]) == ("hybridep", True, False)
    assert ds["recompute"] == "selective" and ds["recompute_modules"] == ["mla_up_proj"]
    gbs = case_scenario(cases["bridge2606-gb300-deepseekv3-mxfp8-gbs15360"])["training"]   # ..._GB300_FP8_MX_GBS15360
    assert (gbs["moe_dispatcher"], gbs["moe_a2a_overlap"], gbs["recompute"]) == ("hybridep", True, "none")
    b300 = case_scenario(cases["bridge2606-b300-deepseekv3-mxfp8"])["training"]   # its layout's v0.5.0 config
    assert b300["moe_dispatcher"] == "hybridep" and b300["recompute_modules"] == ["mla_up_proj"]
    sup = case_scenario(cases["bridge2606-b300-nemotron-3-super-nvfp4"])["training"]
    assert sup["recompute_modules"] == ["moe_act", "layernorm"] and sup["fp8_param_gather"] is False
    # the release's NVFP4 precision config gathers FP4 weights, as v0.4.2's
    assert case_scenario(cases["bridge2606-gb300-llama3.1-405b-nvfp4"])["training"]["fp8_param_gather"] is True
    qwen = case_scenario(cases["bridge2608-gb300-qwen3-235b-a22b-mxfp8"])["training"]   # perf_recipes (v0.6.0)
    assert (qwen["moe_dispatcher"], qwen["moe_a2a_overlap"]) == ("hybridep", True)
    nano = case_scenario(cases["bridge2608-gb300-nemotron-3-nano-mxfp8"])["training"]
    assert nano["moe_dispatcher"] == "hybridep" and not nano.get("moe_a2a_overlap")
    # FP8 attention as each recipe sets fp8_dot_product_attention: the Qwen3 / GB300 DeepSeek-V3
    # MXFP8 recipes do, GB200 DeepSeek-V3's (and every 26.04.01 row's config) does not
    assert qwen["fp8_attention"] is True
    assert case_scenario(cases["bridge2608-gb300-deepseekv3-mxfp8"])["training"]["fp8_attention"] is True
    assert not case_scenario(cases["bridge2608-gb200-deepseekv3-mxfp8"])["training"].get("fp8_attention")
    assert not ds.get("fp8_attention") and not nano.get("fp8_attention")


def test_the_26x_families_are_held_out_and_count_tokens():
    from pipesim.whatif.validation import HELD_OUT, METRIC, SUITES
    for suite in ("bridge2606", "bridge2608"):
        assert suite in HELD_OUT and METRIC[suite] == "tokens" and SUITES[suite] == (suite + "-", None)
