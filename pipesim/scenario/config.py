"""The scenario: frozen, typed, keyword-only dataclasses with SI units inside.

File keys carry units (`memory_GiB`, `bandwidth_GBps`, `latency_us`); the dataclass fields hold
bytes, bytes/s, seconds and FLOP/s. See pipesim/scenario/load.py for reading files.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, Optional

from pipesim.scenario.run_config import RunConfig
from pipesim.scenario.schema import field
from pipesim.scenario.system_config import SystemConfig
from pipesim.scenario.tp_overlap_config import TpOverlapCfg

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
# Bytes per activation/gradient element. FP8 training keeps activations, gradients and
# communication in BF16 and casts only GEMM operands (Micikevicius et al. 2022, "FP8 Formats
# for Deep Learning", Sec. 4; Transformer Engine); TF32 tensors are stored as FP32.
BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2}


# Megatron-Core hybrid layer symbols (megatron/core/models/hybrid/hybrid_layer_allocation.py Symbols)
# -> the layer kind the cost model builds (pipesim/costs/layers.py layer_ops; True = MoE)
HYBRID_KINDS = {"M": "mamba", "G": "gdn", "*": "attention", "-": "mlp", "E": True}


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    name: str = field("custom", doc="preset name or a label")
    arch: Literal["transformer", "cnn"] = field("transformer", doc="model family")
    cnn: Optional[Literal["amoebanet-d", "resnet50", "resnet101", "mobilenetv2"]] = field(
        None, doc="CNN preset (arch: cnn), built as a layer graph by pipesim.partition")
    image_input: Literal["cifar10", "imagenet"] = field("imagenet", doc="CNN input images")
    num_classes: Optional[int] = field(None, doc="CNN classifier classes (default: the input's)")
    cnn_options: dict[str, int] = field(default_factory=dict, doc="CNN shape options (AmoebaNet num_layers, filters)")
    num_layers: int = field(0, doc="transformer layers")
    hidden_size: int = field(0, doc="model width h")
    num_attention_heads: int = field(0, doc="attention heads a")
    num_kv_heads: Optional[int] = field(None, doc="key/value heads for GQA/MQA (default: = heads)")
    ffn_hidden_size: Optional[int] = field(None, doc="MLP inner width (default 4h)")
    seq_length: int = field(0, doc="tokens per sample s")
    vocab_size: int = field(0, doc="vocabulary V")
    activation: Literal["gelu", "relu", "squared_relu", "swiglu"] = field("gelu", doc="MLP activation (all but "
                                                                           "swiglu are one elementwise pass)")
    norm: Literal["layernorm", "rmsnorm"] = field("layernorm", doc="normalisation")
    position: Literal["learned", "rotary", "none"] = field("learned", doc="position embedding (none: NoPE, as "
                                                                      "Nemotron-H's attention layers)")
    tied_embeddings: bool = field(True, doc="LM head shares the input embedding")
    bias: bool = field(True, doc="linear layers have biases")
    causal: bool = field(True, doc="causal (decoder) attention")
    dropout: bool = field(True, doc="dropout layers present (their masks are saved activations)")
    extra_params: int = field(0, doc="parameters outside the layer stack not modelled (pooler, ...)")
    reference_params: Optional[float] = field(None, doc="published parameter count (for checks only)")
    kv_channels: Optional[int] = field(None, doc="attention head dimension when not hidden/heads (Megatron "
                                                 "--kv-channels; Qwen3, GPT-OSS)")
    # Mixture of experts (pipesim/costs/moe.py). num_experts 0 = a dense model.
    num_experts: int = field(0, doc="routed experts per MoE layer (0 = dense model)")
    moe_top_k: int = field(2, doc="experts each token is routed to")
    moe_ffn_hidden_size: Optional[int] = field(None, doc="inner width of one expert (default ffn_hidden_size)")
    num_shared_experts: int = field(0, doc="always-active shared experts per MoE layer (DeepSeek)")
    moe_latent_size: Optional[int] = field(None, doc="LatentMoE (Nemotron 3 Super): routed tokens are projected "
                                                     "to this width before dispatch and back after combine; the "
                                                     "experts and the all-to-all run at it (Megatron-Core "
                                                     "moe_latent_size)")
    moe_layer_freq: int = field(1, doc="every k-th layer is MoE (1 = all layers)")
    moe_first_dense_layers: int = field(0, doc="the first k layers are dense (DeepSeek-V3: 3)")
    moe_router_score: Literal["softmax", "sigmoid"] = field("softmax", doc="router score function")
    moe_router_num_groups: int = field(0, doc="group-limited routing (DeepSeek-V3 node-limited routing; "
                                              "Megatron-Core --moe-router-num-groups): experts in this many "
                                              "groups, 0 = none")
    moe_router_group_topk: int = field(0, doc="with moe_router_num_groups: each token's experts come from at "
                                              "most this many groups (DeepSeek-V3: 4 of 8)")
    # Sliding-window attention (Megatron-Core --window-size, --window-attn-skip-freq; gpt-oss, Gemma 3)
    window_size: int = field(0, doc="sliding-window attention: each query sees this many keys back (0 = full "
                                    "causal attention in every layer)")
    window_attn_skip_freq: int = field(0, doc="with window_size: every k-th layer keeps full attention "
                                              "(gpt-oss: 2, alternating; Llama 4: 4; 0 = every layer windowed)")
    window_kind: Literal["sliding", "chunked"] = field("sliding", doc="sliding: each query sees the window_size "
                                                        "keys before it; chunked: causal attention within "
                                                        "consecutive chunks of window_size tokens (Llama 4)")
    # Multi-token prediction (DeepSeek-V3, arXiv 2412.19437 Sec. 2.2; Megatron-Core --mtp-num-layers)
    mtp_layers: int = field(0, doc="multi-token prediction depth D: D more transformer blocks (the last "
                                   "layer's kind), each with its projection and a pass through the shared "
                                   "output head and loss, on the last pipeline stage (DeepSeek-V3 trained with 1)")
    mtp_hybrid_pattern: Optional[str] = field(None, doc="hybrid models: the layers of one MTP depth in the pattern's "
                                                        "symbols (Megatron-Core mtp_hybrid_override_pattern; "
                                                        "Nemotron 3 Super: \"*E\")")
    mtp_repeated_layer: bool = field(False, doc="every MTP depth runs one shared block (Megatron-Core "
                                                "mtp_use_repeated_layer): compute per depth, weights once")
    # Hybrid Mamba-Transformer models (Megatron-Core MambaModel / HybridModel, hybrid layer pattern;
    # Nemotron-H, Nemotron 3, Qwen3-Next): each character one layer with its own pre-norm and residual.
    hybrid_layer_pattern: str = field("", doc="one character per layer: M = Mamba-2 mixer, G = Gated DeltaNet, "
                                              "* = self-attention, - = dense MLP, E = MoE (Megatron-Core "
                                              "hybrid_layer_pattern); empty = every layer attention + MLP (or MoE)")
    mamba_num_heads: int = field(0, doc="Mamba-2 heads (0 = 2·hidden_size / mamba_head_dim, Megatron's expand 2)")
    mamba_head_dim: int = field(64, doc="Mamba-2 head dimension P")
    mamba_state_dim: int = field(128, doc="Mamba-2 state dimension N")
    mamba_num_groups: int = field(8, doc="Mamba-2 groups sharing B and C")
    mamba_conv_kernel: int = field(4, doc="Mamba-2 / Gated DeltaNet causal depthwise convolution width "
                                          "(Megatron d_conv, linear_conv_kernel_dim)")
    mamba_chunk_size: int = field(128, doc="tokens per chunk of the SSD scan (Megatron MambaMixer chunk_size)")
    # Gated DeltaNet (G layers; Megatron-Core linear_num_key_heads ...; defaults: Qwen3-Next's)
    gdn_num_key_heads: int = field(16, doc="Gated DeltaNet query/key heads")
    gdn_num_value_heads: int = field(32, doc="Gated DeltaNet value heads")
    gdn_key_head_dim: int = field(128, doc="Gated DeltaNet key head dimension")
    gdn_value_head_dim: int = field(128, doc="Gated DeltaNet value head dimension")
    # Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 Sec. 2.1): low-rank q and kv.
    attention_variant: Literal["gqa", "mla", "dsa"] = field(
        "gqa", doc="gqa (MHA/GQA/MQA), mla, or dsa (MLA with DeepSeek sparse attention: a lightning indexer "
                   "picks dsa_index_topk keys per query; DeepSeek-V3.2, GLM-5)")
    q_lora_rank: Optional[int] = field(None, doc="MLA query compression rank (None = no q compression)")
    kv_lora_rank: int = field(512, doc="MLA key/value compression rank")
    qk_rope_head_dim: int = field(64, doc="MLA decoupled rotary dims per head")
    qk_nope_head_dim: int = field(128, doc="MLA non-rotary q/k dims per head")
    v_head_dim: int = field(128, doc="MLA value dims per head")
    # DeepSeek sparse attention (DeepSeek-AI 2025, "DeepSeek-V3.2-Exp", Sec. 2; Megatron-Core
    # --experimental-attention-variant dsa): HF config index_n_heads, index_head_dim, index_topk
    dsa_index_heads: int = field(64, doc="DSA lightning-indexer heads (HF index_n_heads)")
    dsa_index_head_dim: int = field(128, doc="DSA indexer head dimension (HF index_head_dim)")
    dsa_index_topk: int = field(2048, doc="keys each query attends to (HF index_topk)")
    dsa_index_topk_freq: int = field(1, doc="IndexShare (GLM-5.2; Megatron-Core dsa_indexer_topk_freq): one layer "
                                             "in this many computes the top-k, the others reuse it")
    dsa_index_skip_offset: int = field(0, doc="IndexShare: the first layers (1-based, up to this one) all compute "
                                              "the top-k (Megatron-Core dsa_indexer_skip_topk_offset)")
    dsa_indexer_loss: Literal["sparse", "none"] = field(
        "sparse", doc="sparse: the indexer trains on the KL loss over the selected keys (the sparse training "
                      "stage; Megatron --dsa-indexer-use-sparse-loss with a loss coefficient > 0); none: the "
                      "indexer runs without gradients (coefficient 0)")

    def __post_init__(self):
        if self.arch == "cnn":
            if self.cnn is None:
                raise ValueError("arch: cnn needs `cnn:` (amoebanet-d, resnet50, resnet101 or mobilenetv2)")
            return
        missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "vocab_size")
                   if getattr(self, k) <= 0]
        if missing:
            raise ValueError(f"a transformer needs positive {', '.join(missing)}")
        if self.dsa_index_skip_offset < 0:
            raise ValueError(f"dsa_index_skip_offset must not be negative, got {self.dsa_index_skip_offset}")
        if self.mtp_layers < 0:
            raise ValueError(f"mtp_layers must not be negative, got {self.mtp_layers}")
        if self.mtp_layers > self.num_layers:
            # each depth is a whole transformer block on the last stage (DeepSeek-V3 uses 1)
            raise ValueError(f"mtp_layers({self.mtp_layers}) must not exceed num_layers({self.num_layers})")
        if self.window_size < 0 or self.window_attn_skip_freq < 0:
            raise ValueError(f"window_size and window_attn_skip_freq must not be negative, got "
                             f"{self.window_size} and {self.window_attn_skip_freq}")
        if self.hybrid_layer_pattern:
            bad = sorted(set(self.hybrid_layer_pattern) - set(HYBRID_KINDS))
            if bad:
                raise ValueError(f"hybrid_layer_pattern: layer symbols {bad} are not modelled; use M (Mamba), "
                                 f"G (Gated DeltaNet), * (attention), - (MLP), E (MoE), and "
                                 f"parallel.layers_per_stage for the pipeline split ('|')")
            if len(self.hybrid_layer_pattern) != self.num_layers:
                raise ValueError(f"hybrid_layer_pattern has {len(self.hybrid_layer_pattern)} layers but num_layers is "
                                 f"{self.num_layers}")
        if self.mtp_hybrid_pattern is not None:
            bad = sorted(set(self.mtp_hybrid_pattern) - set(HYBRID_KINDS))
            if not self.hybrid_layer_pattern or bad or not self.mtp_hybrid_pattern:
                raise ValueError(f"mtp_hybrid_pattern {self.mtp_hybrid_pattern!r}: one MTP depth of a hybrid model "
                                 f"(hybrid_layer_pattern set) in its symbols M, G, *, -, E")
            if "E" in self.mtp_hybrid_pattern and "E" not in self.hybrid_layer_pattern:
                raise ValueError("mtp_hybrid_pattern: an MoE layer (E) in the MTP block needs MoE layers in the model")
        for key in ("mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups", "mamba_conv_kernel",
                    "mamba_chunk_size", "gdn_num_key_heads", "gdn_num_value_heads", "gdn_key_head_dim",
                    "gdn_value_head_dim", "dsa_index_heads", "dsa_index_head_dim", "dsa_index_topk",
                    "dsa_index_topk_freq"):
            if getattr(self, key) < (0 if key == "mamba_num_heads" else 1):
                raise ValueError(f"{key} must be positive, got {getattr(self, key)}")

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // max(1, self.num_attention_heads)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def computes_topk(self, layer_number: int) -> bool:
        """Whether 1-based layer `layer_number` runs DSA's indexer rather than reusing an earlier
        layer's top-k (Megatron-Core dsa.py is_dsa_skip_topk_layer: offset at least 1)."""
        offset = max(self.dsa_index_skip_offset, 1)
        return max(layer_number - offset, 0) % self.dsa_index_topk_freq == 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention, dense (mla) or with DeepSeek sparse attention (dsa)."""
        return self.attention_variant in ("mla", "dsa")

    @property
    def moe_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn

    def is_moe_layer(self, index: int) -> bool:
        """Layer `index` (0-based) is MoE: past the dense prefix, every moe_layer_freq-th
        (Megatron-Core --moe-layer-freq; DeepSeek-V3 first_k_dense_replace); in a hybrid model, an E."""
        if self.hybrid_layer_pattern:
            return self.hybrid_layer_pattern[index] == "E"
        return (self.is_moe and index >= self.moe_first_dense_layers
                and (index - self.moe_first_dense_layers) % self.moe_layer_freq == 0)

    def layer_kind(self, index: int):
        """The kind of layer `index` as the cost model builds it: False (attention + MLP), True (an
        MoE layer: attention + MoE block); in a hybrid model "mamba", "gdn", "attention", "mlp" or True."""
        if self.hybrid_layer_pattern:
            return HYBRID_KINDS[self.hybrid_layer_pattern[index]]
        return self.is_moe_layer(index)

    @property
    def mamba_heads(self) -> int:
        return self.mamba_num_heads or 2 * self.hidden_size // self.mamba_head_dim

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    @property
    def windowed_share(self) -> float:
        """Share of the layers with sliding-window attention: Megatron-Core windows layer n
        (1-based) unless n % window_attn_skip_freq == 0 (megatron/core/transformer/utils.py
        is_layer_window_attention)."""
        if not self.window_size:
            return 0.0
        k = self.window_attn_skip_freq
        return sum(1 for n in range(1, self.num_layers + 1) if not k or n % k) / self.num_layers

    @property
    def mtp_is_moe(self) -> bool:
        """An MTP block is built like the decoder's last layer (Megatron-Core
        get_gpt_mtp_block_spec takes the last layer's spec)."""
        return self.is_moe_layer(self.num_layers - 1)

    @property
    def mtp_kinds(self) -> list:
        """Layer kinds (layer_kind) of one MTP depth: its hybrid pattern's, else the last layer's."""
        if self.mtp_hybrid_pattern:
            return [HYBRID_KINDS[c] for c in self.mtp_hybrid_pattern]
        return [self.mtp_is_moe]

    @property
    def mtp_weight_depths(self) -> int:
        """MTP depths with their own weights: one when they repeat a shared block."""
        return min(self.mtp_layers, 1) if self.mtp_repeated_layer else self.mtp_layers


@dataclass(frozen=True, kw_only=True)
class ParallelConfig:
    tensor: int = field(1, doc="tensor-parallel size")
    pipeline: int = field(1, doc="pipeline-parallel size")
    data: Optional[int] = field(None, doc="data-parallel size (default: GPUs / (tensor*pipeline))")
    sequence_parallel: bool = field(False, doc="Megatron sequence parallelism (with tensor > 1)")
    virtual_stages: int = field(1, doc="model chunks per pipeline rank (interleaving)")
    tensor_mode: Literal["1d", "2d", "2.5d", "3d"] = field("1d", doc="tensor-parallel algorithm")
    tensor_depth: int = field(1, doc="2.5D depth d (tensor = q*q*d)")
    rank_order: str = field("tp-dp-pp", doc="rank mapping, innermost first (Megatron: tp-dp-pp)")
    layers_per_stage: Optional[tuple[int, ...]] = field(None, doc="uneven layers per (virtual) stage, or auto: "
                                                        "Megatron's split counting the embedding and the loss as "
                                                        "a layer each, or a Megatron layout string such as "
                                                        "\"Et*4|(t*4|)*14tmL\" (scenario/stage_split.py)")
    collective: Literal["ring", "tree", "hierarchical", "auto"] = field("auto", doc="collective algorithm")
    context: int = field(1, doc="context-parallel size CP: the sequence is split over CP GPUs (ring attention)")
    context_mode: Literal["ring", "allgather", "a2a", "a2a+p2p"] = field(
        "ring", doc="CP attention: ring (K/V passed to ring neighbours, overlapped), allgather (K/V gathered), "
                    "a2a (all-to-all from sequence to head shards, DeepSpeed-Ulysses) or a2a+p2p (all-to-all "
                    "inside groups of context_a2a ranks, a ring across them: Megatron's hierarchical CP)")
    context_a2a: Optional[int] = field(None, doc="context_mode a2a+p2p: ranks in each all-to-all group (the inner "
                                                 "level of Megatron's --hierarchical-context-parallel-sizes)")
    context_layout: Literal["balanced", "contiguous"] = field(
        "balanced", doc="CP sequence layout: balanced (2·CP causal chunks, rank i holds i and 2CP-1-i) or "
                        "contiguous (CP chunks in order)")
    expert: int = field(1, doc="expert-parallel size EP (MoE); experts are split over EP ranks")
    expert_tensor: int = field(1, doc="expert tensor-parallel size ETP (each expert split over ETP ranks)")

    @property
    def context_levels(self) -> tuple[int, int]:
        """(all-to-all group size, ring size) of context parallelism: their product is `context`."""
        cp = self.context
        if self.context_mode == "a2a":
            return cp, 1
        if self.context_mode == "a2a+p2p":
            a2a = self.context_a2a or 1
            return a2a, max(1, cp // a2a)
        return 1, cp

    def __post_init__(self):
        for name in ("tensor", "pipeline", "virtual_stages", "tensor_depth", "context"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.data is not None and self.data < 1:
            raise ValueError(f"data must be at least 1, got {self.data}")
        for name in ("expert", "expert_tensor"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.context_a2a is not None and self.context_a2a < 1:
            raise ValueError(f"context_a2a must be at least 1, got {self.context_a2a}")
        dims = self.rank_order.split("-")
        if sorted(d for d in dims if d != "cp") != ["dp", "pp", "tp"] or dims.count("cp") > 1:
            raise ValueError(f"rank_order must order tp, dp and pp (and optionally cp) like 'tp-dp-pp' or "
                             f"'tp-cp-dp-pp', got {self.rank_order!r}")


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    micro_batch_size: int = field(1, doc="samples per micro-batch")
    global_batch_size: int = field(doc="samples per optimizer step")
    schedule: str = field("1f1b", doc="pipeline schedule name or path to an action CSV")
    microbatch_group_size: Optional[int] = field(
        None, doc="interleaved schedule: micro-batches per group, each group running through every chunk "
                  "before the next (Megatron-Core --microbatch-group-size-per-virtual-pipeline-stage; "
                  "Llama 3's flexible N); P <= N <= micro-batches, default P. Larger N: longer warm-up, "
                  "more activations in flight, more P2P slack")
    recompute_modules: tuple[Literal["core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "moe",
                                     "shared_experts"], ...] = field(
        ("core_attn",), doc="recompute: selective re-runs these submodules (Megatron-Core --recompute-modules; "
                            "pipesim/costs/recompute_modules.py): core_attn (the eager attention core), layernorm, "
                            "moe_act, mla_up_proj (output-discarding), mlp, moe, shared_experts (checkpointed)")
    recompute: Literal["none", "selective", "selective_op", "full"] = field(
        "none", doc="activation recomputation: selective = re-run the attention core (Megatron, Korthikanti "
                    "et al. 2022); selective_op = torchtitan's per-op policy (keep the attention and every "
                    "second matmul output, re-run the rest); full = keep only each layer's input")
    recompute_num_layers: Optional[int] = field(None, doc="with recompute full: only the first N transformer "
                                                          "layers of each model chunk recompute, the others keep "
                                                          "their activations (Megatron --recompute-method block "
                                                          "--recompute-num-layers N); null = every layer")
    precision: Precision = field("bf16", doc="compute precision (mixed precision with fp32 master weights)")
    kernel_fusion: Literal["fused", "eager"] = field("fused", doc="fused: Megatron / Transformer Engine kernels "
                                                     "(one pass per norm, rotary, SwiGLU); eager: PyTorch op by op "
                                                     "as torchtitan's Llama runs without torch.compile "
                                                     "(pipesim/costs/eager.py)")
    zero_stage: int = field(0, doc="ZeRO stage 0-3 over the data-parallel group")
    optimizer_state_dtype: Literal["fp32", "bf16"] = field(
        "fp32", doc="Adam's two moments in fp32 or bf16 (Megatron-Core --use-precision-aware-optimizer "
                    "--exp-avg-dtype/--exp-avg-sq-dtype bf16; DeepSeek-V3's recipe); master weights stay fp32")
    master_weights: Literal["fp32", "remainders"] = field(
        "fp32", doc="mixed precision's master weights: fp32, or remainders = the 16 low bits of each fp32 "
                    "master beside the BF16 parameter that holds its high bits (Transformer Engine FusedAdam "
                    "store_param_remainders, Megatron-Core's precision-aware optimizer default from TE 2.1; Apex "
                    "DistributedFusedAdam's): 2 bytes per parameter of optimizer state instead of 4, the "
                    "parameter updated in place. BF16 parameters under Adam on Megatron's distributed optimizer "
                    "(zero_stage <= 2), precision bf16 or fp8 with delayed scaling (Megatron-Core keeps the "
                    "fp32 masters itself under the other FP8 recipes)")
    zero_replicas: int = field(1, doc="hybrid sharding: the data x context group splits into this many "
                                      "replicas of consecutive ranks, each sharding the ZeRO states over its "
                                      "own ranks; gradients reduce-scatter inside a replica, then all-reduce "
                                      "across replicas (Megatron-Core --num-distributed-optimizer-instances, "
                                      "FSDP HSDP, torchtitan data_parallel_replicate_degree; "
                                      "pipesim/costs/zero_groups.py)")
    activation_compression_bits: int = field(16, doc="bits per element sent between stages")
    optimizer: Literal["adam", "sgd", "muon"] = field(
        "adam", doc="optimizer: adam, sgd (momentum), or muon (Megatron-Core's: Newton-Schulz-orthogonalised "
                    "momentum for the hidden 2-D weights, Adam for embeddings, output layer, norms and "
                    "biases; under ZeRO-1/2 each data-parallel rank orthogonalises whole matrices of its own, "
                    "Megatron's layer-wise distributed optimizer; pipesim/costs/muon.py)")
    muon_ns_steps: int = field(5, doc="optimizer muon: Newton-Schulz iterations per step (Megatron-Core "
                                      "muon_num_ns_steps, torch.optim.Muon ns_steps)")
    muon_tp_mode: Literal["duplicated", "blockwise"] = field(
        "duplicated", doc="optimizer muon with tensor parallelism: duplicated = all-gather each matrix over the "
                          "tensor group and orthogonalise it whole on every rank (Megatron-Core's default); "
                          "blockwise = orthogonalise each rank's shard alone (no collective)")
    attention: Literal["auto", "eager", "flash"] = field(
        "auto", doc="attention kernel: flash (fused, keeps no s x s scores), eager (materialized scores), or auto: "
                    "flash in 16-bit and FP8 training on a GPU with a fused-attention table (every kernel-curve GPU "
                    "from V100 on), eager otherwise (FP32/TF32, CPU ranks)")
    attention_kernel: Literal["auto", "cudnn", "cudnn-2024", "cudnn-9.13", "cudnn-9.17", "cudnn-9.19",
                              "sdpa-cudnn", "fa2", "fa3", "fa1", "fa-triton", "xformers"] = field(
        "auto", doc="fused attention's kernel table (attention: flash): auto = what the stack runs: Transformer "
                    "Engine's choice (cuDNN on Hopper/Blackwell, FlashAttention-2 before) with kernel_fusion fused, "
                    "PyTorch SDPA's FlashAttention-2 with kernel_fusion eager (SDPA's order up to torch 2.10; from "
                    "2.11 its bundled cuDNN >= 9.15 makes it prefer cuDNN on Hopper/Blackwell: set sdpa-cudnn); fa2 = "
                    "PyTorch SDPA's flash "
                    "backend; fa3 = FlashAttention-3 (Hopper); cudnn = the newest cuDNN measured (Hopper: "
                    "9.19, February 2026, also named cudnn-9.19; Blackwell: 9.22, April 2026); cudnn-2024 = "
                    "the FlashAttention-3 paper's cuDNN on Hopper (8-22 % below 9.19); cudnn-9.13 / "
                    "cudnn-9.17 = Transformer Engine's cuDNN of October / December 2025 on Blackwell (the "
                    "9.13 backward 0.56-0.91x of 9.22's at 2-32K); sdpa-cudnn = cuDNN through "
                    "PyTorch SDPA's cuDNN backend (measured on Blackwell, 20-30 % below Transformer Engine's "
                    "path; the 2024 cudnn table on Hopper); fa1 = FlashAttention v1 (A100, Hopper); fa-triton = "
                    "a Triton FlashAttention (MPT's attn_impl triton; A100, Hopper); xformers = xformers' "
                    "memory-efficient attention (A100)")
    software_date: Optional[str] = field(
        None, doc="the release date of the training stack's software (YYYY-MM, the container's month, or "
                  "YYYY-MM-DD): with attention_kernel auto under Transformer Engine (kernel_fusion fused), fused "
                  "attention runs the newest cuDNN measured by then (costs/flash.py dated_cudnn: on Hopper the "
                  "2024 table before February 2026; on Blackwell 9.13 before December 2025, 9.17 before April "
                  "2026), the oldest for older software; null: the newest (cudnn)")
    document_length: Optional[int] = field(
        None, doc="packed sequences: documents of this mean length in tokens, concatenated and cut into "
                  "sequences, attend only within themselves (a document mask: Transformer Engine THD / "
                  "FlashAttention varlen / FlexAttention); fused attention then does only the pieces' work "
                  "(pipesim/costs/documents.py), eager attention computes every score under the mask. null: one "
                  "document per sequence")
    document_length_cv: float = field(1.0, doc="with document_length: the lengths' coefficient of variation "
                                                "(gamma distributed; 1 = exponential, 0 = all the same length; "
                                                "web text is heavier-tailed, above 1)")
    document_packing: Literal["random", "balanced"] = field(
        "random", doc="with document_length: random = sequences reach the data-parallel replicas as they come, "
                      "and the replica with the most attention work (the longest documents) holds the others at "
                      "the gradient synchronisation; balanced = the loader evens the attention work out across "
                      "the replicas (Megatron-Core's dynamic-CP solver, workload-aware packing)")
    fp8_activation_input: bool = field(False, doc="SwiGLU keeps its input for the backward in FP8 (E4M3), cast there and "
                                                  "back (Megatron-Core activation_func_fp8_input_store): half the MLP's "
                                                  "largest saved tensor for two memory-bound casts")
    lora_rank: int = field(0, doc="LoRA fine-tuning: the base weights frozen, a trainable adapter of this rank "
                                  "beside each linear of lora_targets (Hu et al. 2021; Megatron-Bridge's LoRA; "
                                  "pipesim/costs/lora.py); 0 = every weight trains")
    lora_targets: tuple[Literal["qkv", "proj", "fc1", "fc2", "q_proj", "q_down", "q_up", "kv_down", "kv_up",
                                "in_proj", "out_proj"], ...] = field(
        ("qkv", "proj", "fc1", "fc2"), doc="with lora_rank: the linears that get an adapter (Megatron-Bridge's "
                                           "default: linear_qkv, linear_proj, linear_fc1, linear_fc2; MLPerf's "
                                           "llama2_70b_lora: qkv and proj; multi-head latent attention has "
                                           "q_down, q_up (or q_proj), kv_down, kv_up and proj instead of qkv; "
                                           "a hybrid model's Mamba / Gated DeltaNet mixers in_proj and out_proj)")
    lora_dropout: float = field(0.0, doc="with lora_rank: dropout on each adapter's input (Megatron-Bridge LoRA "
                                         "dropout, position pre; MLPerf's llama2_70b_lora: 0.1): a masked copy of the "
                                         "input kept for the backward")
    lora_sp_regather: bool = field(False, doc="with lora_rank and sequence parallelism: an adapter beside a column-"
                                              "parallel linear keeps its sequence shard of the norm output and "
                                              "all-gathers it again in the backward (Megatron-Bridge LoRA "
                                              "sequence_parallel_input_regather) instead of keeping the gathered one")
    lora_a2a: bool = field(False, doc="with lora_rank and sequence parallelism: an adapter beside a row-parallel "
                                      "linear returns to the sequence split by one all-to-all instead of an "
                                      "all-gather and a split (Megatron-Bridge LoRA a2a_experimental)")
    cross_entropy: Literal["auto", "megatron", "megatron_fused", "te", "torch", "torch_16bit",
                           "torch_compiled", "flash_attn"] = field(
        "auto", doc="the loss kernel over the logits: megatron = Megatron-LM's unfused vocab-parallel "
                    "cross-entropy, megatron_fused = --cross-entropy-loss-fusion (native), te = Transformer "
                    "Engine's Triton kernel (cross_entropy_fusion_impl te, Megatron-Bridge's performance "
                    "recipes), torch = F.cross_entropy on fp32 logits (over tensor-parallel logits "
                    "PyTorch's loss_parallel), torch_16bit = on the 16-bit logits "
                    "(no upcast), torch_compiled = F.cross_entropy on fp32 logits under "
                    "torch.compile (torchtitan's compiled loss), flash_attn = flash-attn's fused "
                    "CrossEntropyLoss on the 16-bit logits (MPT / llm-foundry's default); auto = torch "
                    "with kernel_fusion eager, "
                    "megatron otherwise (pipesim/costs/layers.py CE_BYTES)")
    logit_metric_passes: int = field(0, doc="extra forward cross-entropy passes over the logits per "
                                            "micro-batch, outside autograd: training metrics computed from "
                                            "the step's own logits (Composer's LanguageCrossEntropy and "
                                            "LanguagePerplexity train metrics: 2), each F.cross_entropy under "
                                            "autocast (pipesim/costs/layers.py head_ops)")
    grad_bucket_MB: float = field(25.0, doc="DP gradient all-reduce bucket size, MB")
    overlap_grad_reduce: bool = field(True, doc="overlap DP reductions with the backward")
    collective_sm_contention: bool = field(True, doc="compute beside an overlapped data-parallel collective runs "
                                                     "on the SMs its NCCL channels leave free (sim/interference.py); "
                                                     "false: collectives that hold no SMs (copy-engine transfers)")
    gemm_sm_margin: int = field(0, doc="SMs Transformer Engine's GEMMs leave free (NVTE_EXT_MARGIN_SM, cuBLASLt's "
                                       "SM_COUNT_TARGET = SMs - margin): every GEMM runs on the others, and a "
                                       "collective or dispatcher beside it holding at most the margin costs it no "
                                       "wave (costs/gemm.py, costs/moe_interference.py)")
    norm_sm_margin: Optional[int] = field(
        None, doc="SMs Transformer Engine's persistent LayerNorm / RMSNorm kernels leave free "
                  "(NVTE_FWD_LAYERNORM_SM_MARGIN / NVTE_BWD_LAYERNORM_SM_MARGIN): a norm kernel launched "
                  "while an overlapped data-parallel collective holds more SMs than this waits for the "
                  "collective to end, and the compute behind it (the DP overlap fails: Megatron-Bridge "
                  "performance guide; sim/interference.py). Unset: the norm kernels never wait "
                  "(non-persistent norms, or a margin no collective exceeds)")
    offload_activation_layers: int = field(0, doc="Transformer layers per model stage whose saved activations "
                                                  "go to host memory after their forward and come back for "
                                                  "their backward, copies overlapped with compute (Megatron "
                                                  "--cpu-offloading-num-layers, which Megatron-Core refuses "
                                                  "with pipeline parallelism or recompute; under a pipeline, "
                                                  "--fine-grained-activation-offloading of every module, "
                                                  "which supports PP and interleaved PP; Transformer Engine "
                                                  "CPU offload)")
    p2p_sync: bool = field(False, doc="pipeline sends and receives between two computes are one blocking batch: "
                                      "each send waits for its receiver to post the receive and the rank waits "
                                      "for the whole batch (Megatron batch_isend_irecv + torch.cuda.synchronize: "
                                      "every 2021-22 schedule, Megatron-Core's non-interleaved 1F1B); false: "
                                      "asynchronous isend/irecv")
    moe_routing: Literal["balanced", "dropless", "capacity"] = field(
        "dropless", doc="balanced: uniform expert load; dropless: the most loaded EP rank sets the pace; "
                        "capacity: tokens beyond moe_capacity_factor are dropped")
    moe_capacity_factor: float = field(1.0, doc="expert capacity / mean load (moe_routing: capacity)")
    moe_routing_skew: float = field(0.25, doc="coefficient of variation of expert popularity per "
                                              "micro-batch (moe_routing: dropless; docs/MOE.md)")
    moe_dispatcher: Literal["alltoall", "deepep", "hybridep"] = field(
        "alltoall", doc="token dispatcher: NCCL all-to-all, DeepEP's fused normal kernels, or HybridEP "
                        "(NVIDIA's fused kernels in DeepEP, Megatron's flex dispatcher backend hybridep); "
                        "costs/moe_dispatch.py")
    moe_dispatcher_sms: Optional[int] = field(
        None, doc="SMs the fused dispatcher's kernels run on (Megatron-Core moe_flex_dispatcher_num_sms); "
                  "default deepep 20, hybridep 32")
    moe_a2a_overlap: bool = field(False, doc="hide one micro-batch's all-to-all under the paired "
                                             "micro-batch's compute (1F1B A2A overlap, DualPipeV)")
    cuda_graphs: Literal["none", "full_iteration"] = field(
        "none", doc="full_iteration: the whole step replayed as one CUDA graph (Megatron-Core "
                    "cuda_graph_impl full_iteration): no host launches and no host synchronisation, so an MoE "
                    "dispatcher exposes no host time (costs/moe_host.py); none: every kernel launched by the "
                    "host (graphs of some modules only count as none). The report's accuracy band follows it")
    moe_shared_expert_overlap: bool = field(False, doc="run the shared experts on a second stream under the "
                                                       "layer's own dispatch and combine (Megatron-Core "
                                                       "--moe-shared-expert-overlap; NeMo AutoModel always)")
    fp8_recipe: Literal["tensorwise", "delayed", "blockwise", "mxfp8", "nvfp4"] = field(
        "tensorwise", doc="low-precision GEMM recipe (precision fp8): FP8 with per-tensor current or delayed "
                          "scaling, 128-element blocks, or MXFP8 (32-element blocks, Blackwell); nvfp4: FP4 "
                          "GEMMs (E2M1 with E4M3 scales per 16 elements and an FP32 scale per tensor, "
                          "Blackwell; pipesim/costs/fp8.py)")
    bf16_layers_start: int = field(0, doc="precision fp8: the first N transformer layers run their GEMMs in BF16 "
                                          "(Megatron-Core --first-last-layers-bf16 --num-layers-at-start-in-bf16; "
                                          "NeMo's FP8 current-scaling recipe keeps 1)")
    bf16_layers_end: int = field(0, doc="precision fp8: the last N transformer layers in BF16 "
                                        "(--num-layers-at-end-in-bf16)")
    bf16_gemms: tuple[Literal["attention", "mlp", "experts", "shared_experts", "moe_latent", "ssm_in_proj",
                              "ssm_out_proj", "mtp"], ...] = field(
        (), doc="precision fp8: these GEMM groups stay in BF16 in every layer (Transformer Engine quantization "
                "configs by module name; pipesim/costs/fp8.py BF16_GEMM_GROUPS)")
    mxfp8_gemms: tuple[Literal["attention", "mlp", "experts", "shared_experts", "moe_latent", "ssm_in_proj",
                               "ssm_out_proj", "mtp"], ...] = field(
        (), doc="fp8_recipe nvfp4: these GEMM groups run MXFP8 instead of NVFP4 (the same quantization configs)")
    bf16_mtp: bool = field(False, doc="precision fp8: the MTP blocks run in BF16 (Megatron-Core "
                                      "keep_mtp_spec_in_bf16)")
    fp8_attention: bool = field(False, doc="precision fp8: fused attention in FP8 too (Transformer Engine's FP8 "
                                          "DotProductAttention, Megatron-Core --fp8-dot-product-attention; per-tensor "
                                          "scaling with fp8_recipe delayed / tensorwise, MXFP8 with mxfp8): cuDNN's FP8 "
                                          "kernel tables, Q/K/V quantized and kept in FP8 (O too under delayed)")
    nccl_max_ctas: dict[Literal["dp", "dp_cp", "tp", "cp", "pp"], int] = field(
        default_factory=dict, doc="CTAs (NCCL channels) a communicator may use, by Megatron-Core group name "
                                  "(--nccl-communicator-config-path max_ctas; MLPerf's NeMo runs: dp / dp_cp 8, "
                                  "tp 8, cp 1, pp 2): its NVLink traffic at most that many CTAs' share and its ring "
                                  "through at most that many NICs of a node (costs/nccl_channels.py); empty = NCCL's own")
    fp8_attention_recipe: Optional[Literal["delayed", "tensorwise", "mxfp8"]] = field(
        None, doc="fp8_attention: the scaling of the FP8 attention when it is not the GEMMs' fp8_recipe "
                  "(Transformer Engine's NVTE_DPA_FP8_RECIPE; needed under nvfp4, which has no FP8 attention of "
                  "its own: MLPerf v5.1's Llama 3.1 8B runs NVFP4 GEMMs with delayed-scaling FP8 attention)")
    fp8_lm_head: bool = field(False, doc="fp8_recipe mxfp8: the output layer (LM head, the MTP depths' too) in "
                                        "MXFP8 like the layers' GEMMs, with its casts and weight copy (Megatron-Core "
                                        "fp8_output_proj: TELMHeadColumnParallelLinear; BF16 otherwise)")
    fp8_param_gather: bool = field(False, doc="precision fp8: keep the FP8-GEMM weights only in FP8 (no BF16 copy; "
                                             "fp32 masters in the optimizer) and all-gather them in FP8 (Megatron "
                                             "--fp8-param-gather, Transformer Engine fp8_model_init; NeMo 2.0 / "
                                             "Megatron-Bridge FP8 recipes turn it on); with fp8_recipe nvfp4 the "
                                             "same in NVFP4 (Megatron --fp4-param-gather)")
    grad_reduce_in_fp32: bool = field(False, doc="accumulate and reduce gradients in fp32 (Megatron-LM's default "
                                                 "for bf16 parameters: arguments.py, accumulate_allreduce_grads_in_fp32)")
    overlap_tp_comm: bool = field(False, doc="overlap tensor-parallel collectives with the GEMMs "
                                             "(Megatron --tp-comm-overlap)")
    tp_overlap: Literal["decomposed", "userbuffers"] = field(
        "decomposed", doc="overlap_tp_comm's model: each collective decomposed into tp chunks pipelined with its "
                          "GEMM (Wang et al. 2022), or Transformer Engine's Userbuffers, each GEMM by its method, "
                          "chunks and SMs (tp_overlap_cfg; costs/tp_overlap.py)")
    tp_overlap_cfg: TpOverlapCfg = field(
        default_factory=dict, doc="Userbuffers settings by GEMM (qkv_fprop, proj_fprop, ..., or all: num_sm, "
                                  "set_sm_margin, num_splits, aggregate), as Transformer Engine's ub_cfgs / "
                                  "--tp-comm-overlap-cfg; unset: TE's defaults (pipesim/costs/tp_overlap.py)")
    tp_grad_overlap: bool = field(False, doc="a column-parallel linear's input-gradient collective (reduce-"
                                             "scatter with sequence parallelism, all-reduce without) runs "
                                             "asynchronously beside its weight-gradient GEMM (Megatron-LM "
                                             "LinearWithGradAccumulationAndAsyncCommunication, "
                                             "--async-tensor-model-parallel-allreduce, October 2021 on; "
                                             "Transformer Engine's Linear backward): exposed only beyond it")
    tp_keeps_gathered_input: bool = field(False, doc="with sequence parallelism: a column-parallel linear "
                                                     "(QKV, fc1, the LM head) keeps its all-gathered input for the "
                                                     "weight gradient, as PyTorch's DTensor tensor parallelism does "
                                                     "(torchtitan: ColwiseParallel redistributes the input before "
                                                     "the linear, whose autograd saves it), instead of its "
                                                     "sequence shard gathered again in the backward (Megatron-LM, "
                                                     "Transformer Engine); needs sequence parallelism")
    overlap_param_gather: bool = field(False, doc="overlap the distributed optimizer's parameter all-gather "
                                                  "with the next step's forward (Megatron --overlap-param-gather)")
    zero3_prefetch: bool = field(True, doc="ZeRO-3: gather the next module's parameters while the current one "
                                           "computes (FSDP, DeepSpeed since mid-2021); false: every gather "
                                           "waits for the compute before it (DeepSpeed <= 0.3.16, PR #1188)")
    reshard_after_forward: bool = field(True, doc="ZeRO-3: free the gathered weights after each module's "
                                                  "forward and gather them again for its backward (FSDP "
                                                  "FULL_SHARD); false: gather once per micro-batch forward "
                                                  "and keep them to its backward (FSDP SHARD_GRAD_OP / "
                                                  "reshard_after_forward=False)")
    fsdp2_ends_in_root: bool = field(False, doc="zero3_collectives fsdp2: the embedding, final norm and output "
                                                "layer are left to the root unit (the model's own fully_shard, "
                                                "torchtitan before July 2025), gathered from the first layer's "
                                                "forward to the last one's and again through the backward; false: "
                                                "each wrapped on its own (torchtitan since, NeMo AutoModel) and "
                                                "gathered around its own compute like a layer")
    zero3_collectives: Literal["tensor", "layer", "fsdp2"] = field(
        "tensor", doc="ZeRO-3 collectives: one weight all-gather per parameter tensor (DeepSpeed ZeRO-3); "
                      "one all-gather and one gradient reduce-scatter per Transformer layer (layer: PyTorch "
                      "FSDP, a flat parameter per wrapped block); or per layer with FSDP2's copies around "
                      "them (fsdp2: fully_shard's all-gather copy-out on the compute stream, "
                      "pipesim/costs/fsdp_copies.py)")
    zero3_gather_GBps: Optional[float] = field(None, doc="ZeRO-3: the framework's achieved parameter-gather rate "
                                                         "per GPU, GB/s, when below the network's (DeepSpeed 0.3.16 "
                                                         "on 8 NVLink A100: 21, issue #1174; docs/WHATIF.md)")

    @property
    def zero3_per_layer(self) -> bool:
        """ZeRO-3 gathers and reduce-scatters once per Transformer layer (FSDP, FSDP2)."""
        return self.zero_stage == 3 and self.zero3_collectives in ("layer", "fsdp2")

    @property
    def fsdp2(self) -> bool:
        """ZeRO-3 as PyTorch FSDP2 runs it (fully_shard: its copies, fp32 shards; torchtitan, NeMo AutoModel)."""
        return self.zero_stage == 3 and self.zero3_collectives == "fsdp2"

    def __post_init__(self):
        if self.micro_batch_size < 1 or self.global_batch_size < 1:
            raise ValueError("batch sizes must be at least 1")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.activation_compression_bits not in (16, 12, 8, 4):
            raise ValueError(f"activation_compression_bits must be 16, 12, 8 or 4, got "
                             f"{self.activation_compression_bits}")
        if self.grad_bucket_MB <= 0:
            raise ValueError("grad_bucket_MB must be positive")
        for name, ctas in self.nccl_max_ctas.items():
            if ctas < 1:
                raise ValueError(f"nccl_max_ctas[{name}] must be at least 1, got {ctas}")
        if self.offload_activation_layers < 0:
            raise ValueError(f"offload_activation_layers must not be negative, got {self.offload_activation_layers}")
        if self.recompute_num_layers is not None:
            if self.recompute_num_layers < 0:
                raise ValueError(f"recompute_num_layers must not be negative, got {self.recompute_num_layers}")
            if self.recompute != "full":
                raise ValueError(f"recompute_num_layers needs recompute: full (Megatron's block method), "
                                 f"got recompute: {self.recompute}")
        if self.gemm_sm_margin < 0:
            raise ValueError(f"gemm_sm_margin must be a number of SMs >= 0, got {self.gemm_sm_margin}")
        if self.norm_sm_margin is not None and self.norm_sm_margin < 0:
            raise ValueError(f"norm_sm_margin must be a number of SMs >= 0, got {self.norm_sm_margin}")
        if self.zero3_gather_GBps is not None and self.zero3_gather_GBps <= 0:
            raise ValueError(f"zero3_gather_GBps must be positive, got {self.zero3_gather_GBps}")
        if self.document_length is not None and self.document_length < 1:
            raise ValueError(f"document_length must be at least 1 token, got {self.document_length}")
        if self.lora_rank < 0:
            raise ValueError(f"lora_rank must not be negative, got {self.lora_rank}")
        if self.logit_metric_passes < 0:
            raise ValueError(f"logit_metric_passes must not be negative, got {self.logit_metric_passes}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be a probability in [0, 1), got {self.lora_dropout}")
        if self.lora_rank and not self.lora_targets:
            raise ValueError("lora_targets must name at least one linear (qkv, proj, fc1, fc2, ...)")
        if not 0 <= self.document_length_cv < math.inf:
            raise ValueError(f"document_length_cv must be a finite number >= 0, got {self.document_length_cv}")
        if self.moe_capacity_factor <= 0:
            raise ValueError(f"moe_capacity_factor must be positive, got {self.moe_capacity_factor}")
        if self.moe_dispatcher_sms is not None and self.moe_dispatcher_sms < 1:
            raise ValueError(f"moe_dispatcher_sms must be at least 1, got {self.moe_dispatcher_sms}")
        if self.moe_routing_skew < 0:
            raise ValueError(f"moe_routing_skew must not be negative, got {self.moe_routing_skew}")
        if not 1 <= self.muon_ns_steps < 100:     # torch.optim.Muon refuses 100 and more
            raise ValueError(f"muon_ns_steps must be 1 to 99, got {self.muon_ns_steps}")


@dataclass(frozen=True, kw_only=True)
class CostsConfig:
    profile: Optional[str] = field(None, doc="path to a calibrated cost profile; null = analytic roofline")


@dataclass(frozen=True, kw_only=True)
class Scenario:
    model: ModelConfig
    system: SystemConfig
    parallel: ParallelConfig
    training: TrainingConfig
    costs: CostsConfig = CostsConfig()
    run: RunConfig = RunConfig()
    source: str = "<dict>"          # file the scenario came from (for error messages and paths)

    @property
    def num_gpus(self) -> int:
        return self.parallel.tensor * self.parallel.context * self.parallel.pipeline * self.parallel.data

    def layer_in_bf16(self, index: int) -> bool:
        """Whether transformer layer `index` runs its GEMMs in BF16 under an FP8 / FP4 recipe
        (training.bf16_layers_start / _end; Megatron-Core fp8_utils.py is_first_last_bf16_layer,
        by the global layer index, keeps those layers out of the FP8 / FP4 context)."""
        tr = self.training
        return tr.precision == "fp8" and (index < tr.bf16_layers_start
                                          or index >= self.model.num_layers - tr.bf16_layers_end)

    def layer_cost_kind(self, index: int):
        """layer_kind, tagged ("bf16", kind) for a layer kept in BF16."""
        kind = self.model.layer_kind(index)
        return ("bf16", kind) if self.layer_in_bf16(index) else kind

    @property
    def mtp_cost_kinds(self) -> list:
        """ModelConfig.mtp_kinds, tagged ("bf16", kind) when the MTP blocks stay in BF16."""
        kinds = self.model.mtp_kinds
        if self.training.bf16_mtp and self.training.precision == "fp8":
            return [("bf16", k) for k in kinds]
        return kinds

    @cached_property
    def cost_kinds(self) -> list:
        """layer_cost_kind of every layer, then of the MTP blocks (computed once per scenario: the
        cost model asks for it per stage)."""
        return [*map(self.layer_cost_kind, range(self.model.num_layers)),
                *(self.mtp_cost_kinds if self.model.mtp_layers else [])]

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline per step: global / (micro * data)."""
        return self.training.global_batch_size // (self.training.micro_batch_size * self.parallel.data)

    @property
    def fsdp2_deferred_grad_sync(self) -> bool:
        """FSDP2 under torch.distributed.pipelining: a stage's gradients are reduce-scattered only
        after its last micro-batch's backward (PipelineStage.backward_maybe_with_nosync calls
        set_requires_gradient_sync(False) for the others), so until then FSDP2 keeps every
        parameter's unsharded gradient, accumulated in the reduce dtype
        (FSDPParam.to_accumulated_grad_if_needed, torch/distributed/fsdp/_fully_shard/_fsdp_param.py)."""
        return self.training.fsdp2 and self.parallel.pipeline > 1 and self.num_microbatches > 1

    @property
    def fsdp2_gathers_once_per_step(self) -> bool:
        """FSDP2 under pipelining that keeps the weights gathered until the last backward
        (set_reshard_after_backward(False) with the deferred gradient sync): one all-gather and
        one reduce-scatter a step, not one per micro-batch."""
        return self.fsdp2_deferred_grad_sync and not self.training.reshard_after_forward

    @property
    def num_model_stages(self) -> int:
        return self.parallel.pipeline * self.parallel.virtual_stages

    def layers_per_stage(self) -> tuple[int, ...]:
        """Transformer layers per model stage (for CNNs: graph nodes per stage when given)."""
        if self.parallel.layers_per_stage:
            return self.parallel.layers_per_stage
        n = self.num_model_stages
        return (self.model.num_layers // n,) * n

    @property
    def bytes_per_element(self) -> int:
        return BYTES_PER_ELEMENT[self.training.precision]

    @property
    def moment_bytes(self) -> int:
        """Bytes of each Adam moment (training.optimizer_state_dtype)."""
        return 2 if self.training.optimizer_state_dtype == "bf16" else 4

    @property
    def master_bytes(self) -> int:
        """Bytes of each mixed-precision master weight (training.master_weights)."""
        return 2 if self.training.master_weights == "remainders" else 4
