"""A Hugging Face `config.json` as pipesim model keys (`model: {hf_config: path}`).

Dense families (GPT-2, Llama, Mistral, Qwen2/3, BERT/RoBERTa) and the MoE / MLA / sliding-window
fields of the 2025-26 families: Mixtral and gpt-oss (`num_local_experts`, the expert width in
`intermediate_size`), Qwen2/3-MoE (`num_experts`, `moe_intermediate_size`, `decoder_sparse_step`,
a shared expert of `shared_expert_intermediate_size`), DeepSeek-V2/V3 and Kimi K2
(`n_routed_experts`, `n_shared_experts`, `first_k_dense_replace`, grouped sigmoid routing, MLA's
`q_lora_rank` / `kv_lora_rank` / head dims, `num_nextn_predict_layers` as MTP depth), gpt-oss's
alternating sliding window (`layer_types`), and `head_dim` where it is not hidden / heads (Qwen3).
A field pipesim cannot express (a list of dense layers, an irregular window pattern) is refused in
one line instead of loading a different model.
"""
from __future__ import annotations

import json
from pathlib import Path

from pipesim.scenario.schema import Loader

_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
# The model types whose every field pipesim reads is mapped (tests/test_hf_config.py): another type
# may carry fields that change the model (Gemma's alternating windows and GeGLU, GLM's QKV bias and
# partial rotary, ...) and is refused rather than loaded as something else.
MAPPED_TYPES = ("gpt2", "bert", "roberta", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
                "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss")


def from_hf_config(path: Path, loader: Loader) -> dict:
    """Map a Hugging Face config.json onto pipesim model keys."""
    if not path.exists():
        loader.fail("model.hf_config", f"file not found: {path}")
    try:
        cfg = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:     # ValueError: also 5,000-digit ints
        loader.fail("model.hf_config", f"{path} is not valid JSON ({str(exc)[:100]})")
    except OSError as exc:
        loader.fail("model.hf_config", f"cannot read {path} ({exc.strerror})")
    if not isinstance(cfg, dict):
        loader.fail("model.hf_config", f"{path}: expected a JSON object, got {type(cfg).__name__}")

    def pick(*names, default=None):
        for n in names:
            if n in cfg:
                return cfg[n]
        if default is None:
            loader.fail("model.hf_config", f"{path} lacks {' / '.join(names)}")
        return default

    def refuse(key: str, why: str):
        loader.fail("model.hf_config", f"{path}: {key} {cfg.get(key)!r}: {why}")

    model_type = cfg.get("model_type", "")
    if model_type and model_type not in MAPPED_TYPES:
        loader.fail("model.hf_config", f"{path}: model_type {model_type!r} is not mapped (mapped: "
                    f"{', '.join(MAPPED_TYPES)}); give the model's keys in the scenario or use a preset")
    llama_like = model_type in ("llama", "mistral", "qwen2") or cfg.get("hidden_act") == "silu"
    bert_like = model_type in ("bert", "roberta")
    out = {
        "name": cfg.get("_name_or_path") or model_type or path.stem,
        "num_layers": pick("num_hidden_layers", "n_layer"),
        "hidden_size": pick("hidden_size", "n_embd"),
        "num_attention_heads": pick("num_attention_heads", "n_head"),
        "seq_length": pick("max_position_embeddings", "n_positions", "n_ctx"),
        "vocab_size": pick("vocab_size"),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", not llama_like)),
    }
    ffn = cfg.get("intermediate_size") or cfg.get("n_inner")
    if ffn:
        out["ffn_hidden_size"] = ffn
    mla = cfg.get("kv_lora_rank") is not None
    if cfg.get("num_key_value_heads") and not mla:
        out["num_kv_heads"] = cfg["num_key_value_heads"]
    if cfg.get("head_dim") and not mla:
        out["kv_channels"] = cfg["head_dim"]
    if llama_like:       # no dropout unless the config sets one (attention_dropout 0.0 in all of them)
        out.update(activation="swiglu", norm="rmsnorm", position="rotary", bias=bool(cfg.get("attention_bias")),
                   dropout=bool(cfg.get("attention_dropout") or cfg.get("hidden_dropout")))
    if bert_like:
        out.update(causal=False)
    if mla:          # DeepSeek-V2/V3, Kimi K2: multi-head latent attention
        out.update(attention_variant="mla", q_lora_rank=cfg.get("q_lora_rank"), kv_lora_rank=cfg["kv_lora_rank"],
                   qk_rope_head_dim=pick("qk_rope_head_dim"), qk_nope_head_dim=pick("qk_nope_head_dim"),
                   v_head_dim=pick("v_head_dim"))
    if cfg.get("num_nextn_predict_layers"):
        out["mtp_layers"] = cfg["num_nextn_predict_layers"]
    try:
        out.update(_experts(cfg, out, refuse))
        out.update(_window(cfg, out["num_layers"], refuse))
    except (TypeError, ValueError, ZeroDivisionError, KeyError, OverflowError) as exc:      # a garbled value
        loader.fail("model.hf_config", f"{path}: an MoE or window field has an unexpected value ({exc})")
    return out


def _experts(cfg: dict, out: dict, refuse) -> dict:
    experts = next((cfg[k] for k in _EXPERTS if cfg.get(k)), 0)
    if not experts:
        return {}
    moe = {"num_experts": experts, "moe_top_k": cfg.get("num_experts_per_tok", 2),
           # Mixtral and gpt-oss give the expert width as intermediate_size
           "moe_ffn_hidden_size": cfg.get("moe_intermediate_size") or out.get("ffn_hidden_size")}
    if cfg.get("n_shared_experts"):
        moe["num_shared_experts"] = cfg["n_shared_experts"]
    shared = cfg.get("shared_expert_intermediate_size")        # Qwen2-MoE: one wider shared expert
    if shared:
        if shared % moe["moe_ffn_hidden_size"]:
            refuse("shared_expert_intermediate_size", f"not a multiple of the expert width "
                   f"{moe['moe_ffn_hidden_size']} (pipesim counts shared experts of the routed width)")
        moe["num_shared_experts"] = shared // moe["moe_ffn_hidden_size"]
    if cfg.get("first_k_dense_replace"):
        moe["moe_first_dense_layers"] = cfg["first_k_dense_replace"]
    freq = cfg.get("moe_layer_freq") or cfg.get("decoder_sparse_step") or 1
    if freq != 1:
        moe["moe_layer_freq"] = freq
    if cfg.get("mlp_only_layers"):
        refuse("mlp_only_layers", "a list of dense layers is not expressible (pipesim: a dense prefix "
               "moe_first_dense_layers and every moe_layer_freq-th layer MoE)")
    if cfg.get("scoring_func") == "sigmoid":
        moe["moe_router_score"] = "sigmoid"
    if (cfg.get("n_group") or 1) > 1:
        moe.update(moe_router_num_groups=cfg["n_group"], moe_router_group_topk=cfg.get("topk_group", 1))
    return moe


def _window(cfg: dict, layers: int, refuse) -> dict:
    """Sliding-window attention: gpt-oss alternates sliding and full layers (`layer_types`);
    Mistral's first release windows every layer (`sliding_window` alone)."""
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        return {}
    types = cfg.get("layer_types")
    if not types:
        return {"window_size": window}
    full = [n for n, kind in enumerate(types, 1) if kind == "full_attention"]
    if not full:
        return {"window_size": window}
    k = full[0]
    if full != list(range(k, layers + 1, k)):
        refuse("layer_types", "full-attention layers are not every k-th layer (pipesim: window_attn_skip_freq)")
    return {"window_size": window, "window_attn_skip_freq": k}
