"""Per-row settings of the bridge2606 held-out family (the Megatron-Bridge 26.06 tables), from the
release's own performance configs: github:NVIDIA-NeMo/Megatron-Bridge tag v0.5.1 (5cb3444c,
2026-07-20, the tag whose docs/performance-summary.md holds the 26.06 tables), scripts/performance/
configs/*/*_workload_base_configs.py and *_llm_pretrain.py. 30 of the 31 rows have a config there
whose layout (GPUs, global and micro batch, TP, PP, VP, CP, EP) is the table's; the comment names
it. The DGX-B300 DeepSeekV3 row (MBS 2, no VP) has none (DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2
runs MBS 1 with VP 2 there) and takes the config of its layout at v0.5.0, the tag before (whose
26.06 table did not have the row yet); rows whose config sets nothing mapped run the family
defaults. Test only.

Mapped as bridge2604's (validation_bridge_2604.py `_recipe`): HybridEP / DeepEP dispatch, A2A
overlap, recompute modules (activation offloading and Megatron-FSDP: no row's config sets them),
FP8 attention (fp8_dot_product_attention=True: the DeepSeek-V3 GB300 / B300 FP8_MX_V1 configs the
V2 ones extend, GPT-OSS GB300 / GB200 FP8_MX_V2, every Qwen3 FP8_MX config of a row here), and
full-iteration CUDA graphs (cuda_graph_impl "full_iteration" in the DeepSeek-V3, GPT-OSS and Qwen3
FP8_MX configs here but B300 GPT-OSS's; *_llm_pretrain.py set_full_iter_cg_configs adds paged
stashing and a fixed per-expert capacity, 1.5x the mean, for the capture: sizing, not computed),
and the MXFP8 output layer (fp8_output_proj -> training.fp8_lm_head: deepseek_llm_pretrain.py's
GB300 / GB200 and gpt_oss_llm_pretrain.py's GB300 / GB200 functions, for MXFP8).
Precision: v0.5.1's precision configs (src/megatron/bridge/training/mixed_precision.py, scripts/
performance/utils/precision.py) are v0.4.2's: FP8 and MXFP8 keep and gather FP8 weights,
bf16_with_nvfp4_mixed sets fp4_param_gather (the NVFP4 rows as bridge2604's NVFP4_ROW), Nemotron 3
Super's NVFP4 recipe turns it off (BRIDGE_PRECISION_RECIPES); only the check that an MXFP8
parameter gather reuses the gradient buffer is gone.
Not mapped, new at v0.5.1 (no key in `_recipe`):
- cutedsl_fused_grouped_mlp (Transformer Engine's op fuser with the CuTe-DSL fused grouped MLP),
  in every DeepSeek-V3, GPT-OSS and Qwen3 MXFP8 config here but B300 GPT-OSS's.
Not mapped, as for bridge2604: CUDA graphs of some modules only, environment variables, and Llama 3.1
405B NVFP4's TP-overlap off (with, on GB200, parameter-gather overlap off: llama31_llm_pretrain.py).
"""
from __future__ import annotations

from pipesim.whatif.validation_bridge_2604 import _recipe

# row id (without the "bridge2606-" prefix) -> training keys; the v0.5.1 config beside each.
# The Llama 3.1 405B configs set nothing mapped: LLAMA31_405B_PRETRAIN_CONFIG_{GB300,GB200}_
# {FP8_CS,FP8_MX,NVFP4}_V2 and _H100_FP8_CS_V2 (use_megatron_fsdp False, CUDA graphs).
ROWS = {
    # DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2 (recompute_modules [])
    "gb300-deepseekv3-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True,
                                      fp8_lm_head=True),
    # DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_GBS15360 (the V2 config with GBS 15360)
    "gb300-deepseekv3-mxfp8-gbs15360": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True,
                                               fp8_lm_head=True),
    # DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2
    "gb200-deepseekv3-mxfp8": _recipe(flex=True, a2a=True, modules=['mla_up_proj'], full_graph=True,
                                      fp8_lm_head=True),
    # no v0.5.1 config of its layout: v0.5.0's DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2 (= B300_V2: MBS 2,
    # PP 8, HybridEP, recompute mla_up_proj, graphs of attention / router), which commit 78540b2
    # ("Update DSV3 B300 perf recipe", 2026-06-29) replaced before v0.5.1; v0.5.0's B300 function sets
    # no fp8_output_proj (only v0.5.1's does)
    "b300-deepseekv3-mxfp8": _recipe(flex=True, modules=['mla_up_proj']),
    # GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2
    "gb300-gpt-oss-120b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True,
                                        fp8_lm_head=True),
    # GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 (recompute_modules [])
    "gb200-gpt-oss-120b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True,
                                        fp8_lm_head=True),
    # GPT_OSS_120B_PRETRAIN_CONFIG_B300_FP8_MX_V2
    "b300-gpt-oss-120b-mxfp8": _recipe(flex=True),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1
    "gb300-qwen3-30b-a3b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1
    "gb200-qwen3-30b-a3b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1
    "b300-qwen3-30b-a3b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1
    "h100-qwen3-30b-a3b-fp8": _recipe(flex=True),
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2
    "gb300-qwen3-235b-a22b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True),
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2
    "gb200-qwen3-235b-a22b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True),
    # KIMI_K2_PRETRAIN_CONFIG_GB300_FP8_MX
    "gb300-kimi-k2-mxfp8": _recipe(flex=True, modules=['mla_up_proj']),
    # NEMOTRON_3_NANO_PRETRAIN_CONFIG_GB300_FP8_MX_V1
    "gb300-nemotron-3-nano-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_NANO_PRETRAIN_CONFIG_GB200_FP8_MX_V1
    "gb200-nemotron-3-nano-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_NANO_PRETRAIN_CONFIG_B300_FP8_MX_V1
    "b300-nemotron-3-nano-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_FP8_CS_V1
    "h100-nemotron-3-nano-fp8": _recipe(flex=True, modules=['moe', 'layernorm', 'core_attn', 'moe_act']),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_GB300_FP8_MX_V1
    "gb300-nemotron-3-super-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_GB300_NVFP4_V1
    "gb300-nemotron-3-super-nvfp4": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_GB200_FP8_MX_V1
    "gb200-nemotron-3-super-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_GB200_NVFP4_V1
    "gb200-nemotron-3-super-nvfp4": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B300_FP8_MX_V1
    "b300-nemotron-3-super-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B300_NVFP4_V1 (recompute moe_act, layernorm)
    "b300-nemotron-3-super-nvfp4": _recipe(flex=True, modules=['moe_act', 'layernorm']),
}
