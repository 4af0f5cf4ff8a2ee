"""Model presets, in scenario-file keys. Each entry cites where its shape comes from.

`reference_params` is the published (or released-checkpoint) parameter count, used by tests to
check pipesim's parameter counting; it is not an input to any cost.
"""

_GPT2 = dict(activation="gelu", norm="layernorm", position="learned", tied_embeddings=True,
             bias=True, causal=True, seq_length=1024, vocab_size=50257)

# Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", Table 2
# (layers, d_model); heads and context from the released configs (openai-community/gpt2*).
# reference_params: parameter counts of the released checkpoints (tied embeddings).
GPT2 = {
    "gpt2-small": dict(_GPT2, num_layers=12, hidden_size=768, num_attention_heads=12, reference_params=124_439_808),
    "gpt2-medium": dict(_GPT2, num_layers=24, hidden_size=1024, num_attention_heads=16, reference_params=354_823_168),
    "gpt2-large": dict(_GPT2, num_layers=36, hidden_size=1280, num_attention_heads=20, reference_params=774_030_080),
    "gpt2-xl": dict(_GPT2, num_layers=48, hidden_size=1600, num_attention_heads=25, reference_params=1_557_611_200),
}

_GPT3 = dict(_GPT2, seq_length=2048)

# Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1 (n_layers, d_model,
# n_heads, d_head; n_ctx = 2048). Two rows of the table are internally inconsistent and are
# corrected here: 1.3B lists 24 heads of 128 (24*128 != 2048) -> 16 heads of 128; 13B lists
# d_model 5140, not divisible by its 40 heads -> 5120 (as in every reimplementation).
GPT3 = {
    "gpt3-125m": dict(_GPT3, num_layers=12, hidden_size=768, num_attention_heads=12, reference_params=125e6),
    "gpt3-350m": dict(_GPT3, num_layers=24, hidden_size=1024, num_attention_heads=16, reference_params=350e6),
    "gpt3-760m": dict(_GPT3, num_layers=24, hidden_size=1536, num_attention_heads=16, reference_params=760e6),
    "gpt3-1.3b": dict(_GPT3, num_layers=24, hidden_size=2048, num_attention_heads=16, reference_params=1.3e9),
    "gpt3-2.7b": dict(_GPT3, num_layers=32, hidden_size=2560, num_attention_heads=32, reference_params=2.7e9),
    "gpt3-6.7b": dict(_GPT3, num_layers=32, hidden_size=4096, num_attention_heads=32, reference_params=6.7e9),
    "gpt3-13b": dict(_GPT3, num_layers=40, hidden_size=5120, num_attention_heads=40, reference_params=13.0e9),
    "gpt3-175b": dict(_GPT3, num_layers=96, hidden_size=12288, num_attention_heads=96, reference_params=175.0e9),
}

# No dropout: Llama's reference model.py has no dropout layer, and the released config.json files
# set attention_dropout 0.0 (Megatron / NeMo Llama recipes: hidden and attention dropout 0.0).
_LLAMA = dict(activation="swiglu", norm="rmsnorm", position="rotary", tied_embeddings=False,
              bias=False, causal=True, dropout=False)

# Touvron et al. 2023, "Llama 2", Table 1 (context 4096, GQA for 70B) and the released
# config.json files (hidden, intermediate size, heads, vocab 32000); reference_params are the
# released checkpoints' exact counts.
# Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3 (layers, model dim, FFN dim, heads,
# 8 KV heads, vocab 128,256); context 8192 for the pre-trained models.
LLAMA = {
    "llama2-7b": dict(_LLAMA, num_layers=32, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=11008,
                      seq_length=4096, vocab_size=32000, reference_params=6_738_415_616),
    "llama2-13b": dict(_LLAMA, num_layers=40, hidden_size=5120, num_attention_heads=40, ffn_hidden_size=13824,
                       seq_length=4096, vocab_size=32000, reference_params=13_015_864_320),
    "llama2-70b": dict(_LLAMA, num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                       ffn_hidden_size=28672, seq_length=4096, vocab_size=32000, reference_params=68_976_648_192),
    "llama3-8b": dict(_LLAMA, num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                      ffn_hidden_size=14336, seq_length=8192, vocab_size=128256, reference_params=8_030_261_248),
    "llama3-70b": dict(_LLAMA, num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                       ffn_hidden_size=28672, seq_length=8192, vocab_size=128256, reference_params=70_553_706_496),
    # Llama 3.2 1B: meta-llama/Llama-3.2-1B config.json (16 layers, hidden 2048, intermediate 8192,
    # 32 heads of 64, 8 KV heads, vocab 128,256, tie_word_embeddings true); 1,235,814,400 parameters.
    "llama3.2-1b": dict(_LLAMA, num_layers=16, hidden_size=2048, num_attention_heads=32, num_kv_heads=8,
                        ffn_hidden_size=8192, seq_length=8192, vocab_size=128256, tied_embeddings=True,
                        reference_params=1_235_814_400),
}

_BERT = dict(activation="gelu", norm="layernorm", position="learned", tied_embeddings=True, bias=True,
             causal=False, seq_length=512)

# Devlin et al. 2019, "BERT", Section 3 (BERT-large: L=24, H=1024, A=16; 340M rounded; the
# released bert-large-uncased has 335,141,888 incl. pooler). Liu et al. 2019, "RoBERTa"
# (BERT-base shape, BPE vocab 50,265; released roberta-base: 124,645,632 incl. pooler).
# The encoder-only extras (token-type embeddings, pooler) are counted as `extra_params`.
BERT = {
    "bert-large": dict(_BERT, num_layers=24, hidden_size=1024, num_attention_heads=16, vocab_size=30522,
                       extra_params=2 * 1024 + 1024 * 1024 + 1024, reference_params=335_141_888),
    "roberta-base": dict(_BERT, num_layers=12, hidden_size=768, num_attention_heads=12, vocab_size=50265,
                         seq_length=514, extra_params=1 * 768 + 768 * 768 + 768, reference_params=124_645_632),
}

# CNNs as layer graphs built by pipesim.partition.cnn (shapes, FLOPs and parameters there; the
# parameter counts equal torchvision's: resnet50 25,557,032; resnet101 44,549,160; mobilenetv2
# 3,504,872). AmoebaNet-D follows Real et al. 2019 / torchgpipe's amoebanet(L, F).
CNNS = {
    "resnet50": dict(arch="cnn", cnn="resnet50"),
    "resnet101": dict(arch="cnn", cnn="resnet101"),
    "mobilenetv2": dict(arch="cnn", cnn="mobilenetv2"),
    "amoebanet-d": dict(arch="cnn", cnn="amoebanet-d"),
}

# No dropout either: every config below has attention_dropout 0.0 and no hidden dropout.
_MOE = dict(_LLAMA, seq_length=4096)

# Mixture-of-experts models (pipesim/costs/moe.py, docs/MOE.md). Shapes from each released
# Hugging Face config.json; seq_length 4096 is the pre-training context of DeepSeek-V3 (arXiv
# 2412.19437 Sec. 4.2), Qwen3 (tech report arXiv 2505.09388 Sec. 3.1, stage 1) and gpt-oss
# (initial_context_length) and the Megatron MoE model zoo's runs; Mixtral's is not published.
MOE = {
    # mistralai/Mixtral-8x7B-v0.1 config.json: hidden 4096, intermediate 14336, 32 layers, 32 heads,
    # 8 kv heads, 8 local experts, 2 per token, vocab 32000, untied. Jiang et al. 2024, "Mixtral of
    # Experts" (arXiv 2401.04088) Sec. 2: 47B total, 13B active; released checkpoint 46,702,792,704.
    "mixtral-8x7b": dict(_MOE, num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                         ffn_hidden_size=14336, vocab_size=32000, num_experts=8, moe_top_k=2,
                         reference_params=46_702_792_704),
    # mistralai/Mixtral-8x22B-v0.1 config.json: hidden 6144, intermediate 16384, 56 layers, 48 heads,
    # 8 kv heads, 8 experts, top-2, vocab 32768. Mistral AI, "Cheaper, Better, Faster, Stronger"
    # (2024-04-17): 141B total, 39B active.
    "mixtral-8x22b": dict(_MOE, num_layers=56, hidden_size=6144, num_attention_heads=48, num_kv_heads=8,
                          ffn_hidden_size=16384, vocab_size=32768, num_experts=8, moe_top_k=2,
                          reference_params=141e9),
    # deepseek-ai/DeepSeek-V3 config.json: hidden 7168, 61 layers, 128 heads, MLA q_lora_rank 1536,
    # kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128; dense
    # intermediate 18432 for the first_k_dense_replace = 3 layers; 256 routed experts of
    # moe_intermediate 2048, top-8, 1 shared expert, sigmoid scores; vocab 129280, untied.
    # DeepSeek-V3 technical report (arXiv 2412.19437) Sec. 4.2: 671B total, 37B active (the 14B
    # multi-token-prediction module is not counted). Node-limited routing, Sec. 2.1.2: a token's
    # experts on at most 4 nodes (config n_group 8, topk_group 4; Megatron-Bridge DeepSeekV3
    # provider moe_router_num_groups 8, moe_router_group_topk 4).
    "deepseek-v3": dict(_MOE, num_layers=61, hidden_size=7168, num_attention_heads=128, ffn_hidden_size=18432,
                        vocab_size=129280, attention_variant="mla", q_lora_rank=1536, kv_lora_rank=512,
                        qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, num_experts=256,
                        moe_top_k=8, moe_ffn_hidden_size=2048, num_shared_experts=1, moe_first_dense_layers=3,
                        moe_router_score="sigmoid", moe_router_num_groups=8, moe_router_group_topk=4,
                        reference_params=671e9),
    # Qwen/Qwen3-30B-A3B config.json: hidden 2048, 48 layers, 32 heads, 4 kv heads, head_dim 128,
    # 128 experts of moe_intermediate 768, top-8, vocab 151936, untied. Model card: 30.5B total,
    # 3.3B activated.
    "qwen3-30b-a3b": dict(_MOE, num_layers=48, hidden_size=2048, num_attention_heads=32, num_kv_heads=4,
                          kv_channels=128, ffn_hidden_size=6144, vocab_size=151936, num_experts=128, moe_top_k=8,
                          moe_ffn_hidden_size=768, reference_params=30.5e9),
    # Qwen/Qwen3-235B-A22B config.json: hidden 4096, 94 layers, 64 heads, 4 kv heads, head_dim 128,
    # 128 experts of moe_intermediate 1536, top-8, vocab 151936, untied. Model card: 235B total,
    # 22B activated.
    "qwen3-235b-a22b": dict(_MOE, num_layers=94, hidden_size=4096, num_attention_heads=64, num_kv_heads=4,
                            kv_channels=128, ffn_hidden_size=12288, vocab_size=151936, num_experts=128,
                            moe_top_k=8, moe_ffn_hidden_size=1536, reference_params=235e9),
    # meta-llama/Llama-4-Scout-17B-16E config.json (text): hidden 5120, 48 layers, 40 heads of 128,
    # 8 kv heads, 16 experts of intermediate 8192, 1 per token, a shared expert of the same width in
    # every layer, vocab 202048, untied; attention_chunk_size 8192 with every 4th layer global
    # (no_rope_layer_interval 4: HF Llama4 uses chunked attention in its RoPE layers). Meta
    # (2025-04-05): 109B total, 17B active for the released multimodal model; the text model counted
    # here is 107.8B (17.2B active), 1.1 % short, so no reference_params (no text-only figure).
    "llama4-scout": dict(_MOE, num_layers=48, hidden_size=5120, num_attention_heads=40, num_kv_heads=8,
                         ffn_hidden_size=16384, vocab_size=202048, num_experts=16, moe_top_k=1,
                         moe_ffn_hidden_size=8192, num_shared_experts=1, window_size=8192,
                         window_attn_skip_freq=4, window_kind="chunked"),
    # meta-llama/Llama-4-Maverick-17B-128E: as Scout with 128 experts in every 2nd layer
    # (interleave_moe_layer_step 2: layers 1, 3, ... are MoE) and dense layers of
    # intermediate_size_mlp 16384. Meta: 400B total, 17B active.
    "llama4-maverick": dict(_MOE, num_layers=48, hidden_size=5120, num_attention_heads=40, num_kv_heads=8,
                            ffn_hidden_size=16384, vocab_size=202048, num_experts=128, moe_top_k=1,
                            moe_ffn_hidden_size=8192, num_shared_experts=1, moe_first_dense_layers=1,
                            moe_layer_freq=2, window_size=8192, window_attn_skip_freq=4,
                            window_kind="chunked", reference_params=400e9),
    # openai/gpt-oss-120b config.json: 36 layers, hidden 2880, 64 heads of head_dim 64, 8 kv heads,
    # 128 experts of intermediate 2880, 4 per token, attention/expert/router biases, vocab 201088,
    # untied; layers alternate 128-token sliding-window and full attention, the first windowed
    # (config.json "sliding_window": 128, "layer_types"; Megatron-Bridge GPTOSSProvider:
    # window_size (128, 0), window_attn_skip_freq 2). The 64 attention-sink scalars per layer are
    # not counted. OpenAI gpt-oss model card (2025-08-05) Table 1: 116.83B total, 5.13B active.
    "gpt-oss-120b": dict(_MOE, num_layers=36, hidden_size=2880, num_attention_heads=64, num_kv_heads=8,
                         kv_channels=64, ffn_hidden_size=2880, vocab_size=201088, num_experts=128, moe_top_k=4,
                         bias=True, window_size=128, window_attn_skip_freq=2, reference_params=116.83e9),
    # openai/gpt-oss-20b config.json: as gpt-oss-120b with 24 layers and 32 experts. Model card
    # Table 1: 20.91B total, 3.61B active.
    "gpt-oss-20b": dict(_MOE, num_layers=24, hidden_size=2880, num_attention_heads=64, num_kv_heads=8,
                        kv_channels=64, ffn_hidden_size=2880, vocab_size=201088, num_experts=32, moe_top_k=4,
                        bias=True, window_size=128, window_attn_skip_freq=2, reference_params=20.91e9),
    # moonshotai/Kimi-K2-Base config.json (DeepseekV3 architecture): 61 layers, hidden 7168, 64
    # heads, MLA as DeepSeek-V3 (q_lora_rank 1536, kv_lora_rank 512, rope 64, nope 128, v 128),
    # first_k_dense_replace 1 with intermediate 18432, 384 routed experts of 2048, top-8, 1 shared,
    # sigmoid scores, n_group 1 (no group-limited routing), vocab 163840, untied, no MTP. Kimi K2
    # technical report (arXiv 2507.20534) Table 2: 1.04T total, 32.6B activated. These shapes give
    # 1.026T (32.86B active with the embedding): 1.3 % short of the report's figure, whose count is
    # not itemised, so no reference_params.
    "kimi-k2": dict(_MOE, num_layers=61, hidden_size=7168, num_attention_heads=64, ffn_hidden_size=18432,
                    vocab_size=163840, attention_variant="mla", q_lora_rank=1536, kv_lora_rank=512,
                    qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, num_experts=384, moe_top_k=8,
                    moe_ffn_hidden_size=2048, num_shared_experts=1, moe_first_dense_layers=1,
                    moe_router_score="sigmoid"),
    # zai-org/GLM-4.5 (GLM-4.5 technical report, arXiv 2508.06471, Table 1; the Megatron arguments
    # of THUDM/slime scripts/models/glm4.5-355B-A32B.sh): 3 dense + 89 MoE layers, hidden 5120, 96
    # heads of 128, 8 kv heads, dense intermediate 12288, 160 experts of 1536, top-8, 1 shared,
    # sigmoid scores, vocab 151552, untied. QK-norm, QKV biases and the half-rotary embedding are
    # not costed (vector work of a few hidden-size passes). 355B total, 32B active; the report's one
    # MTP layer is `model.mtp_layers: 1` (356.8B with it, 352.8B without).
    "glm-4.5": dict(_MOE, num_layers=92, hidden_size=5120, num_attention_heads=96, num_kv_heads=8,
                    kv_channels=128, ffn_hidden_size=12288, vocab_size=151552, num_experts=160, moe_top_k=8,
                    moe_ffn_hidden_size=1536, num_shared_experts=1, moe_first_dense_layers=3,
                    moe_router_score="sigmoid", reference_params=355e9),
    # DeepSeek-V3.2-Exp (deepseek-ai/DeepSeek-V3.2-Exp inference/config_671B_v3.2.json): DeepSeek-V3
    # with DeepSeek sparse attention, "the only architectural modification" (its report, Sec. 2):
    # index_n_heads 64, index_head_dim 128, index_topk 2048. Its continued training ran at 128K
    # (Sec. 2.1). The indexer adds 0.85B weights (13.96M a layer); no main-model total is published
    # apart from the checkpoint's 685B with the MTP module, so no reference_params.
    "deepseek-v3.2": dict(_MOE, num_layers=61, hidden_size=7168, num_attention_heads=128, ffn_hidden_size=18432,
                          vocab_size=129280, attention_variant="dsa", q_lora_rank=1536, kv_lora_rank=512,
                          qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, num_experts=256,
                          moe_top_k=8, moe_ffn_hidden_size=2048, num_shared_experts=1, moe_first_dense_layers=3,
                          moe_router_score="sigmoid", moe_router_num_groups=8, moe_router_group_topk=4,
                          dsa_index_heads=64, dsa_index_head_dim=128, dsa_index_topk=2048, seq_length=131072),
    # zai-org/GLM-5 (GLM-5 technical report, arXiv 2602.15763; config.json as NVIDIA's
    # Megatron-Bridge GLM-5 page quotes it): MLA + DSA + MoE, 3 dense + 75 MoE layers, hidden 6144,
    # 64 heads, q_lora_rank 2048, kv_lora_rank 512, qk_nope 192, qk_rope 64, v 256, dense
    # intermediate 12288, 256 experts of 2048, top-8, 1 shared, sigmoid scores, vocab 154880,
    # untied; indexer 32 heads of 128, top-2048; one MTP layer (`model.mtp_layers: 1`). The report:
    # 744B total, 40B active.
    "glm-5": dict(_MOE, num_layers=78, hidden_size=6144, num_attention_heads=64, ffn_hidden_size=12288,
                  vocab_size=154880, attention_variant="dsa", q_lora_rank=2048, kv_lora_rank=512,
                  qk_rope_head_dim=64, qk_nope_head_dim=192, v_head_dim=256, num_experts=256, moe_top_k=8,
                  moe_ffn_hidden_size=2048, num_shared_experts=1, moe_first_dense_layers=3,
                  moe_router_score="sigmoid", dsa_index_heads=32, dsa_index_head_dim=128, dsa_index_topk=2048,
                  reference_params=744e9),
    # zai-org/GLM-4.5-Air (same sources; slime glm4.5-106B-A12B.sh): 1 dense + 45 MoE layers,
    # hidden 4096, 96 heads of 128, 8 kv heads, dense intermediate 10944, 128 experts of 1408,
    # top-8, 1 shared. 106B total, 12B active.
    "glm-4.5-air": dict(_MOE, num_layers=46, hidden_size=4096, num_attention_heads=96, num_kv_heads=8,
                        kv_channels=128, ffn_hidden_size=10944, vocab_size=151552, num_experts=128, moe_top_k=8,
                        moe_ffn_hidden_size=1408, num_shared_experts=1, moe_first_dense_layers=1,
                        moe_router_score="sigmoid", reference_params=106e9),
}

# Published active parameters per token: (count, counts the input embedding table, resolution
# of the published figure). gpt-oss's card and DeepSeek-V3 leave the embedding table out (a
# lookup; with it DeepSeek-V3 has 37.55B, without 36.63B, "37B"); Mixtral and Qwen3 count every
# weight a token touches. Qwen's figures are truncated, not rounded (30.53B total -> "30.5B",
# 3.35B active -> "3.3B", 22.19B -> "22B"), so their resolution is one unit of the last digit.
ACTIVE_PARAMS = {
    "mixtral-8x7b": (12.9e9, True, 0.05e9),
    "mixtral-8x22b": (39e9, True, 0.5e9),
    "deepseek-v3": (37e9, False, 0.5e9),
    "qwen3-30b-a3b": (3.3e9, True, 0.1e9),
    "qwen3-235b-a22b": (22e9, True, 0.5e9),
    "gpt-oss-120b": (5.13e9, False, 0.005e9),
    "gpt-oss-20b": (3.61e9, False, 0.005e9),
    "llama4-maverick": (17e9, True, 0.5e9),
    "nemotron-3-nano": (3.6e9, True, 0.05e9),
    "qwen3-next-80b-a3b": (3e9, True, 1e9),
    "glm-5": (40e9, False, 1e9),
}

# Llama 3.1 405B (dense), preset kept as its own block (issue 15). Dubey et al. 2024, "The Llama 3
# Herd of Models" (arXiv 2407.21783), Table 3: 126 layers, model dimension 16,384, FFN dimension
# 53,248, 128 attention heads, 8 key/value heads, vocabulary 128,256; RoPE, RMSNorm, SwiGLU,
# untied output layer; context 8K in pre-training, 128K after long-context training (Sec. 3.4.2).
# The released config (meta-llama/Llama-3.1-405B, config.json) has the same shape with
# max_position_embeddings 131072. reference_params: the paper's 405B (Table 3; the released
# checkpoint holds 405.85e9), checked to 1 % by tests/test_context.py.
LLAMA31 = {
    "llama3.1-405b": dict(_LLAMA, num_layers=126, hidden_size=16384, num_attention_heads=128, num_kv_heads=8,
                          ffn_hidden_size=53248, seq_length=8192, vocab_size=128256, reference_params=405e9),
}

# Qwen3 dense (Qwen3 technical report, arXiv 2505.09388, Table 1; Qwen/Qwen3-8B and Qwen3-32B
# config.json): GQA with head_dim 128, QK-norm (not costed), SwiGLU, RMSNorm, vocab 151936,
# untied, no dropout; pre-training stage 1 at 4096 tokens (Sec. 3.1). Model cards: 8.2B, 32.8B.
QWEN3 = {
    "qwen3-8b": dict(_LLAMA, num_layers=36, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                     kv_channels=128, ffn_hidden_size=12288, vocab_size=151936, seq_length=4096, dropout=False,
                     reference_params=8.2e9),
    "qwen3-32b": dict(_LLAMA, num_layers=64, hidden_size=5120, num_attention_heads=64, num_kv_heads=8,
                      kv_channels=128, ffn_hidden_size=25600, vocab_size=151936, seq_length=4096, dropout=False,
                      reference_params=32.8e9),
}

# Hybrid Mamba-Transformer models (pipesim/costs/mamba.py): one layer per pattern character, M =
# Mamba-2 mixer, * = attention (no position embedding), - = squared-ReLU MLP, E = MoE. Shapes from
# Megatron-Bridge's recipes (src/megatron/bridge/recipes/nemotronh/h100/nemotronh.py and
# nemotron_3_nano.py, HybridModelProvider arguments); Mamba head dim 64 and 8 groups, vocab 131072
# (make_vocab_size_divisible_by 128 of the Nemotron tokenizer), untied, no biases.
_HYBRID = dict(_LLAMA, position="none", activation="squared_relu", seq_length=8192, vocab_size=131072,
               dropout=False, mamba_head_dim=64, mamba_num_groups=8)
_NEMOTRONH_PERIOD = "M-M-M-M-M*-"
HYBRID = {
    # Nemotron-H (NVIDIA, arXiv 2504.03624): 8B, 52 layers (24 Mamba, 4 attention, 24 MLP), 128
    # Mamba heads of state 128; 56B, 118 layers (54, 10, 54), 256 heads of state 256; GQA with 8
    # kv groups. Model cards: 8B and 56B.
    "nemotronh-8b": dict(_HYBRID, num_layers=52, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                         ffn_hidden_size=21504, mamba_num_heads=128, mamba_state_dim=128,
                         hybrid_layer_pattern="M-M-M-M*-" + _NEMOTRONH_PERIOD * 3 + "M-M-M-M-M-",
                         reference_params=8e9),
    "nemotronh-56b": dict(_HYBRID, num_layers=118, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                          ffn_hidden_size=32768, mamba_num_heads=256, mamba_state_dim=256,
                          hybrid_layer_pattern="M-M-M-M*-" + _NEMOTRONH_PERIOD * 9 + "M-M-M-M-M-",
                          reference_params=56e9),
    # Nemotron 3 Nano 30B-A3B: 52 layers (23 Mamba, 23 MoE, 6 attention), hidden 2688, 64 Mamba heads,
    # 32 attention heads of 128 with 2 kv groups, 128 experts of 1856 (top-6, sigmoid router) and a
    # shared expert of 3712 (two of 1856 here). Model card: 31.6B total, 3.6B active with the
    # embeddings (3.2B without).
    "nemotron-3-nano": dict(_HYBRID, num_layers=52, hidden_size=2688, num_attention_heads=32, num_kv_heads=2,
                            kv_channels=128, ffn_hidden_size=1856, mamba_num_heads=64, mamba_state_dim=128,
                            num_experts=128, moe_top_k=6, moe_ffn_hidden_size=1856, num_shared_experts=2,
                            moe_router_score="sigmoid",
                            hybrid_layer_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
                            reference_params=31.6e9),
    # Nemotron 3 Super 120B-A12B (nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16 config.json, as
    # Megatron-Bridge's recipe reads it: recipes/nemotronh/nemotron_3_super.py): 88 layers (40 Mamba,
    # 40 LatentMoE, 8 attention), hidden 4096, 128 Mamba heads of 64 with state 128 and 8 groups,
    # 32 attention heads of 128 with 2 kv groups, 512 experts of 2688 (top-22, squared ReLU) at a
    # latent width of 1024, a shared expert of 5376 (two of 2688 here), vocab 131072, untied. The
    # checkpoint: 123,611,012,096 BF16 weights, 2,942,324,736 of them the MTP block ("*E", not
    # modelled in this preset), so 120,668,687,360 without it.
    "nemotron-3-super": dict(_HYBRID, num_layers=88, hidden_size=4096, num_attention_heads=32, num_kv_heads=2,
                             kv_channels=128, ffn_hidden_size=2688, mamba_num_heads=128, mamba_state_dim=128,
                             num_experts=512, moe_top_k=22, moe_ffn_hidden_size=2688, num_shared_experts=2,
                             moe_latent_size=1024, moe_router_score="sigmoid",
                             hybrid_layer_pattern="MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
                                                  "EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
                             reference_params=120_668_687_360),
    # Qwen/Qwen3-Next-80B-A3B config.json: 48 layers, each a token mixer and an MoE block, the mixer
    # Gated DeltaNet in three of every four (full_attention_interval 4; 16 key heads and 32 value
    # heads of 128, conv width 4) and gated attention in the fourth (16 heads of 256, 2 kv heads);
    # 512 experts of 512, top-10, one shared expert of 512; hidden 2048, vocab 151936, untied.
    # Megatron-Core builds it as a GPT model with the gated_delta_net attention variant
    # (Megatron-Bridge qwen3_next_bridge.py); here the 96 sublayers of the hybrid pattern. The
    # attention output gate (q_proj doubled, 0.1 % of the weights) and the shared-expert gate are
    # not costed. Model card: 80B total, 3B activated (79.57B and 3.77B with the embedding here).
    "qwen3-next-80b-a3b": dict(_MOE, num_layers=96, hidden_size=2048, num_attention_heads=16, num_kv_heads=2,
                               kv_channels=256, ffn_hidden_size=512, vocab_size=151936, num_experts=512,
                               moe_top_k=10, moe_ffn_hidden_size=512, num_shared_experts=1,
                               hybrid_layer_pattern="GEGEGE*E" * 12, reference_params=80e9),
}

# Dense models of 2022 whose training runs are published (their throughput in their papers).
# BLOOM: Le Scao et al. 2022, arXiv:2211.05100, Sec. 3.2 / Table 3 (70 layers, d 14336, 112 heads,
# seq 2048, ALiBi - no position parameters, pipesim's "none" - GeLU, LayerNorm also on the word
# embeddings, tied embeddings, dropout 0), vocab 250,880 (the released bigscience/bloom config,
# the 250,680 tokens padded); 176,247M parameters (the paper). OPT-175B: Zhang et al. 2022,
# arXiv:2205.01068, Table 1 (96 layers, 96 heads, d 12288; ReLU, learned positions, seq 2048,
# vocab 50,272 of the released configs). MT-NLG 530B: Smith et al. 2022, arXiv:2201.11990,
# Sec. 3.2 (105 layers, d 20480, 128 heads, seq 2048, the GPT-2 vocabulary as Megatron pads it).
DENSE_2022 = {
    "bloom-176b": dict(_GPT3, position="none", num_layers=70, hidden_size=14336, num_attention_heads=112,
                       vocab_size=250880, dropout=False, reference_params=176.247e9),
    "opt-175b": dict(_GPT3, activation="relu", num_layers=96, hidden_size=12288, num_attention_heads=96,
                     vocab_size=50272, reference_params=175.0e9),
    "mt-nlg-530b": dict(_GPT3, num_layers=105, hidden_size=20480, num_attention_heads=128, vocab_size=51200,
                        reference_params=530.0e9),
}

MODELS: dict[str, dict] = {**GPT2, **GPT3, **LLAMA, **BERT, **CNNS, **MOE, **LLAMA31, **QWEN3, **HYBRID,
                           **DENSE_2022}
