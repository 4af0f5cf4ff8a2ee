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

_LLAMA = dict(activation="swiglu", norm="rmsnorm", position="rotary", tied_embeddings=False,
              bias=False, causal=True)

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

MODELS: dict[str, dict] = {**GPT2, **GPT3, **LLAMA, **BERT, **CNNS, **LLAMA31}
