"""Per-row settings of the bridge2608 held-out family (the Megatron-Bridge 26.08 tables), from the
release's own performance configs: github:NVIDIA-NeMo/Megatron-Bridge tag v0.6.0 (51885cf1,
2026-08-19, the tag whose docs/performance-summary.md holds the 26.08 tables). That tag has no
scripts/performance/configs/: its performance configs are flat recipes, one function per GPU
count, system and precision, in src/megatron/bridge/perf_recipes/<family>/<system>/<model>.py. Every
one of the 18 rows has one whose layout (GPUs, global and micro batch, TP, PP, VP, CP, EP) is the
table's; the comment names it. Rows without an entry run the family defaults. Test only.

Mapped as bridge2604's (validation_bridge_2604.py `_recipe`): HybridEP / DeepEP dispatch, A2A
overlap (comm_overlap.overlap_moe_expert_parallel_comm), recompute modules (no modelled row's
recipe offloads activations or uses Megatron-FSDP), and FP8 attention (mixed_precision.
fp8_dot_product_attention: qwen/common.py _enable_hybridep_full_iteration_mxfp8, gpt_oss/common.py
_apply_gpt_oss_120b_full_iter_fp8mx_configs, GB300 DeepSeek-V3's recipe; not GB200's), and
full-iteration CUDA graphs (the same helpers and deepseek/common.py
_enable_deepseek_full_iteration_mxfp8, GB200 DeepSeek-V3's too: every DeepSeek-V3, GPT-OSS and Qwen3
row here; with paged stashing and a fixed per-expert capacity for the capture: sizing, not computed),
and the MXFP8 output layer (fp8_output_proj -> training.fp8_lm_head: deepseek/common.py
_enable_deepseek_full_iteration_mxfp8 on GB300 and GB200, gpt_oss/common.py).
Precision: perf_recipes/_common.py `_perf_precision` takes v0.4.2's precision configs
(src/megatron/bridge/training/mixed_precision.py: MXFP8 keeps and gathers FP8 weights,
bf16_with_nvfp4_mixed sets fp4_param_gather, the NVFP4 rows as bridge2604's NVFP4_ROW); Nemotron 3
Super's NVFP4 recipe still turns FP4 parameter gather off (perf_recipes/nemotronh/common.py,
BRIDGE_PRECISION_RECIPES); only the check that an MXFP8 parameter gather reuses the gradient buffer
is gone.
Not mapped (no key in `_recipe`), as in bridge2606 (validation_bridge_2606.py):
- the CuTe-DSL fused grouped MLP (use_transformer_engine_op_fuser, NVTE_CUTEDSL_FUSED_GROUPED_MLP)
  in the DeepSeek-V3, GPT-OSS and Qwen3 MXFP8 recipes;
- CUDA graphs of some modules only, and environment variables, as for bridge2604.
"""
from __future__ import annotations

from pipesim.whatif.validation_bridge_2604 import _recipe

# row id (without the "bridge2608-" prefix) -> training keys; the v0.6.0 recipe beside each.
# Skipped rows (BRIDGE_NO_PRESET): deepseek/{gb300,gb200}/deepseek_v4.py
# deepseek_v4_flash_pretrain_128gpu_{gb300,gb200}_fp8mx_config; nemotronh/gb200/nemotronh.py
# nemotron_3_5_lightning_pretrain_8gpu_gb200_fp8mx_config (Nemotron 3 Nano's recipe with two MTP
# passes); nemotronh/{gb300,gb200}/nemotronh.py nemotron_3_ultra_pretrain_256gpu_{gb300,gb200}_fp8mx_config
# (Megatron-FSDP sharded within each 64-GPU NVLink domain, recompute and offload of the expert MLP).
ROWS = {
    # deepseek/gb300/deepseek_v3.py deepseek_v3_pretrain_256gpu_gb300_fp8mx_config (recompute_modules [])
    "gb300-deepseekv3-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True, fp8_lm_head=True),
    # deepseek/gb200/deepseek_v3.py deepseek_v3_pretrain_256gpu_gb200_fp8mx_config
    "gb200-deepseekv3-mxfp8": _recipe(flex=True, a2a=True, modules=['mla_up_proj'], full_graph=True,
                                      fp8_lm_head=True),
    # gpt_oss/gb300/gpt_oss.py gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config
    "gb300-gpt-oss-120b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True, fp8_lm_head=True),
    # gpt_oss/gb200/gpt_oss.py gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config (recompute_modules [] last)
    "gb200-gpt-oss-120b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True, fp8_lm_head=True),
    # qwen/gb300/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config
    "gb300-qwen3-30b-a3b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True),
    # qwen/gb200/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config
    "gb200-qwen3-30b-a3b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True),
    # qwen/gb300/qwen3_moe.py qwen3_235b_a22b_pretrain_256gpu_gb300_fp8mx_config
    "gb300-qwen3-235b-a22b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True),
    # qwen/gb200/qwen3_moe.py qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config
    "gb200-qwen3-235b-a22b-mxfp8": _recipe(flex=True, a2a=True, fp8_attention=True, full_graph=True),
    # nemotronh/gb300/nemotronh.py nemotron_3_nano_pretrain_8gpu_gb300_fp8mx_config
    "gb300-nemotron-3-nano-mxfp8": _recipe(flex=True),
    # nemotronh/gb300/nemotronh.py nemotron_3_super_pretrain_64gpu_gb300_fp8mx_config
    "gb300-nemotron-3-super-mxfp8": _recipe(flex=True),
    # nemotronh/gb300/nemotronh.py nemotron_3_super_pretrain_64gpu_gb300_nvfp4_config
    "gb300-nemotron-3-super-nvfp4": _recipe(flex=True),
    # nemotronh/gb200/nemotronh.py nemotron_3_super_pretrain_64gpu_gb200_fp8mx_config
    "gb200-nemotron-3-super-mxfp8": _recipe(flex=True),
    # nemotronh/gb200/nemotronh.py nemotron_3_super_pretrain_64gpu_gb200_nvfp4_config
    "gb200-nemotron-3-super-nvfp4": _recipe(flex=True),
}
