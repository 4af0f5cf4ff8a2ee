"""Per-row settings of the bridge2604 held-out family (the Megatron-Bridge 26.04.01 tables), from
the release's own performance configs: github:NVIDIA-NeMo/Megatron-Bridge tag v0.4.2 (2026-05-28,
the tag whose docs hold the 26.04.01 tables), scripts/performance/configs/*/
*_workload_base_configs.py. Every one of the 39 modelled rows has a config there whose layout
(GPUs, global and micro batch, TP, PP, VP, CP, EP) is the table's; the comment names it. Test only.

Mapped (pipesim/whatif/validation_bridge.py applies them over the family's defaults):
- moe_flex_dispatcher_backend hybridep / deepep -> training.moe_dispatcher hybridep / deepep (the
  fused dispatch-combine kernels, at their default SMs: the scripts set moe_hybridep_num_sms = 32 for
  every hybridep run, utils/overrides.py; costs/moe_dispatch.py). Only DeepSeek-V3 on B200 (FP8_MX,
  NVFP4) and Qwen3-Next on B200/B300 name deepep in v0.4.2-v0.5.1; every other flex row hybridep;
- moe_a2a_overlap -> training.moe_a2a_overlap;
- recompute_modules -> recompute selective with those modules (Megatron-Core recompute_modules);
- cpu_offloading_num_layers -> training.offload_activation_layers;
- cuda_graph_impl full_iteration -> training.cuda_graphs full_iteration (no v0.4.2 config of a
  26.04.01 MoE row sets it; modules-only graphs count as none);
- fp8_output_proj -> training.fp8_lm_head (the MXFP8 output layer; new at v0.5.1);
- fp8_dot_product_attention -> training.fp8_attention (Transformer Engine's FP8 attention; no
  v0.4.2 config of a 26.04.01 row sets it: the 26.06 / 26.08 families use it);
- use_megatron_fsdp -> ZeRO-3 with one gather and reduce-scatter per layer (Megatron-FSDP's
  default FSDP unit is the transformer layer: megatron/core/distributed/fsdp/mcore_fsdp_adapter.py,
  fsdp_unit_modules = [TransformerLayer, MoETransformerLayer, MambaLayer]).
Not mapped: CUDA graphs of some modules only (host time pipesim does not model), pipeline layouts,
environment variables. Rows without an entry run the family defaults. `_recipe` and NVFP4_ROW map the 26.06 and
26.08 releases' configs too (validation_bridge_2606.py, validation_bridge_2608.py).
"""
from __future__ import annotations


def _recipe(flex: bool = False, a2a: bool = False, modules=None, offload: int = 0,
            megatron_fsdp: bool = False, fp8_attention: bool = False, full_graph: bool = False,
            fp8_lm_head: bool = False, backend: str = "hybridep") -> dict:
    """`flex`: the row runs Megatron's flex dispatcher, with `backend` (hybridep unless the config
    names deepep)."""
    out = {}
    if fp8_lm_head:
        out["fp8_lm_head"] = True
    if full_graph:
        out["cuda_graphs"] = "full_iteration"
    if fp8_attention:
        out["fp8_attention"] = True
    if flex:
        out["moe_dispatcher"] = backend
    if a2a:
        out["moe_a2a_overlap"] = True
    if modules:
        out.update(recompute="selective", recompute_modules=list(modules))
    if offload:
        out["offload_activation_layers"] = offload
    if megatron_fsdp:
        out["zero3_collectives"] = "layer"
    return out


# row id (without the "bridge2604-" prefix) -> training keys; the v0.4.2 config beside each
ROWS = {
    # LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2
    "gb300-llama3-70b-fp8": _recipe(offload=20, megatron_fsdp=True),
    # LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2
    "gb200-llama3-70b-fp8": _recipe(offload=40, megatron_fsdp=True),
    # DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2
    "gb300-deepseekv3-mxfp8": _recipe(flex=True, modules=['mla_up_proj']),
    # DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2
    "gb200-deepseekv3-mxfp8": _recipe(flex=True, modules=['mlp']),
    # DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2
    "b300-deepseekv3-mxfp8": _recipe(flex=True, modules=['mla_up_proj']),
    # DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2
    "b200-deepseekv3-mxfp8": _recipe(flex=True, a2a=True, modules=['mla_up_proj', 'mlp'], backend="deepep"),
    # GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2
    "gb200-gpt-oss-120b-bf16": _recipe(a2a=True, modules=['layernorm', 'moe_act']),
    # GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2
    "b300-gpt-oss-120b-bf16": _recipe(flex=True),
    # GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2
    "b200-gpt-oss-120b-bf16": _recipe(modules=['layernorm', 'moe_act']),
    # GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2
    "h100-gpt-oss-120b-bf16": _recipe(modules=['layernorm', 'moe_act']),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1
    "gb300-qwen3-30b-a3b-mxfp8": _recipe(flex=True),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1
    "gb200-qwen3-30b-a3b-mxfp8": _recipe(flex=True),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1
    "b300-qwen3-30b-a3b-mxfp8": _recipe(flex=True),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1
    "b200-qwen3-30b-a3b-mxfp8": _recipe(flex=True),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1
    "h100-qwen3-30b-a3b-fp8": _recipe(flex=True),
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2
    "gb300-qwen3-235b-a22b-mxfp8": _recipe(flex=True),
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2
    "gb200-qwen3-235b-a22b-mxfp8": _recipe(flex=True),
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2
    "b300-qwen3-235b-a22b-mxfp8": _recipe(flex=True),
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2
    "h100-qwen3-235b-a22b-fp8": _recipe(a2a=True),
    # KIMI_K2_PRETRAIN_CONFIG_GB300_FP8_MX
    "gb300-kimi-k2-mxfp8": _recipe(flex=True, modules=['mla_up_proj']),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_GB300_FP8_MX_V1 (BASE_NEMOTRON_3_SUPER_CONFIG: hybridep, EP64)
    "gb300-nemotron-3-super-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_GB200_FP8_MX_V1 (the base with TP2)
    "gb200-nemotron-3-super-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B300_FP8_MX_V1 (the base with EP8)
    "b300-nemotron-3-super-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B200_FP8_MX_V1 (EP64, recompute moe_act and layernorm)
    "b200-nemotron-3-super-mxfp8": _recipe(flex=True, modules=['moe_act', 'layernorm']),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_GB300_NVFP4_V1 (the base)
    "gb300-nemotron-3-super-nvfp4": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_GB200_NVFP4_V1 (the base with TP2)
    "gb200-nemotron-3-super-nvfp4": _recipe(flex=True),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B300_NVFP4_V1 (= B300_BF16_V1: EP8, recompute moe_act, layernorm)
    "b300-nemotron-3-super-nvfp4": _recipe(flex=True, modules=['moe_act', 'layernorm']),
    # NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B200_NVFP4_V1 (the B200 base with TP2, no recompute)
    "b200-nemotron-3-super-nvfp4": _recipe(flex=True),
    # NEMOTRON_3_NANO_PRETRAIN_CONFIG_GB300_FP8_MX_V1
    "gb300-nemotron-3-nano-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_NANO_PRETRAIN_CONFIG_GB200_FP8_MX_V1
    "gb200-nemotron-3-nano-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_NANO_PRETRAIN_CONFIG_B300_FP8_MX_V1
    "b300-nemotron-3-nano-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_NANO_PRETRAIN_CONFIG_B200_FP8_MX_V1
    "b200-nemotron-3-nano-mxfp8": _recipe(flex=True),
    # NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_FP8_CS_V1
    "h100-nemotron-3-nano-fp8": _recipe(flex=True, modules=['moe', 'layernorm', 'core_attn', 'moe_act']),
}


# The release's NVFP4 precision config stores and gathers the FP4-GEMM weights in NVFP4
# (v0.4.2 src/megatron/bridge/training/mixed_precision.py bf16_with_nvfp4_mixed: fp4_param_gather =
# True; at v0.2.0, the 25.11 tables' tag, it did not exist; v0.5.1 and v0.6.0 set it as v0.4.2).
NVFP4_ROW = dict(fp8_param_gather=True)
