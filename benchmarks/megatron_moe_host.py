"""Host time of Megatron-Core's own MoE layer, measured on this CPU at negligible size, beside the
GPU time and the host term pipesim models for the same layer.

Fine-grained MoE runs are predicted too fast (docs/MOE.md; `pipesim simulate` prints by how much
for the class). Published per-layer times that do not change between GPUs 2x apart point at host
time (note 18). This benchmark runs Megatron-Core's MoELayer - router, alltoall token dispatcher
with its count copy, permutation, experts, unpermutation - forward and backward at hidden 64 on
the CPU, where the arithmetic is nil and what remains is Python, dispatcher and autograd time per
layer. It is evidence, not a model input: pipesim does not read it.

    pip install --no-deps megatron-core==0.16.1     # a pure-Python wheel; not a pipesim dependency
    python benchmarks/megatron_moe_host.py

On a CPU-only torch (this project's machines) the dispatcher's CUDA streams and events are no-op
stand-ins (the count copy becomes a CPU copy; a real one also waits for the GPU), Transformer
Engine is absent so the experts run as SequentialMLP (a linear pair per expert, not TE's
GroupedLinear), and with one rank no all-to-all is launched; the figures are this CPU's, and a
training node's may be faster (x86 at 3.8 GHz) or slower (Grace). On a GPU node nothing is stubbed:
the layer runs on CUDA (with TE's GroupedLinear when Transformer Engine imports) and each pass is
timed to its last kernel, so at this size the figure is the host's. That path has not run here
(no GPU is lent to this project).
"""
from __future__ import annotations

import contextlib
import os
import statistics
import time

LOCAL_EXPERTS = (4, 8, 16, 32)
TOP_K = 8
HIDDEN = 64
TOKENS = 8
REPS = 100


def _stub_cuda(torch) -> None:
    """No-op CUDA streams and events for Megatron-Core's dispatcher on a CPU-only torch."""
    class Stream:
        def __init__(self, *a, **k): pass
        def wait_stream(self, *a): pass
        def synchronize(self): pass
        def record_event(self, *a, **k): return Event()
        def wait_event(self, *a): pass

    class Event:
        def __init__(self, *a, **k): pass
        def record(self, *a, **k): pass
        def synchronize(self): pass
        def wait(self, *a): pass
        def query(self): return True

    torch.cuda.Stream, torch.cuda.Event = Stream, Event
    torch.cuda.current_stream = lambda *a, **k: Stream()
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.current_device = lambda: "cpu"
    ones = torch.ones

    def ones_here(*a, **k):            # the local attention's causal mask is built on "cuda"
        if k.get("device") == "cuda":
            k["device"] = "cpu"
        return ones(*a, **k)
    torch.ones = ones_here


def _setup():
    import torch
    import torch.distributed as dist
    if not torch.cuda.is_available():
        _stub_cuda(torch)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=0, world_size=1)
    from megatron.core import parallel_state as ps
    ps.initialize_model_parallel(1, 1, expert_model_parallel_size=1)
    from megatron.core.transformer.moe import moe_utils
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None       # 0.16.1 names it only when TE imports
    if not torch.cuda.is_available():          # attention's dropout region forks the CUDA RNG
        from megatron.core import tensor_parallel
        tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
    torch.set_num_threads(1)
    return torch


def _has_te() -> bool:
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        return False
    return True


def measure(experts: int | None, whole_layer: bool = False) -> dict:
    """Median host seconds of one MoE block (or, with `whole_layer`, one TransformerLayer: norms,
    attention, MLP or MoE block; `experts` None = dense) forward and backward, and its aten op
    counts."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.transformer_layer import TransformerLayer
    moe = {} if experts is None else dict(
        num_moe_experts=experts, moe_router_topk=min(TOP_K, experts), moe_ffn_hidden_size=32,
        moe_token_dispatcher_type="alltoall", moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-3)
    cfg = TransformerConfig(num_layers=1, hidden_size=HIDDEN, num_attention_heads=4, ffn_hidden_size=2 * HIDDEN,
                            use_cpu_initialization=True, add_bias_linear=False, attention_dropout=0.0,
                            hidden_dropout=0.0, **moe)
    cuda = torch.cuda.is_available()
    if cuda and _has_te():          # a GPU node with TE: the path training runs (TE's GroupedLinear)
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
        cfg.moe_grouped_gemm = experts is not None
        spec = get_gpt_layer_with_transformer_engine_spec(num_experts=experts, moe_grouped_gemm=experts is not None)
    else:
        spec = get_gpt_layer_local_spec(num_experts=experts)
    if whole_layer:
        layer = TransformerLayer(cfg, spec.submodules, layer_number=1)
    else:
        layer = MoELayer(cfg, spec.submodules.mlp.submodules)
    device = "cuda" if cuda else "cpu"
    if cuda:
        layer.cuda()
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def forward():
        x = torch.randn(TOKENS, 1, HIDDEN, device=device, requires_grad=True)
        return layer(x, attention_mask=None)[0] if whole_layer else layer(x)[0]

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    for _ in range(10):
        forward().sum().backward()
    with Count():
        out = forward()
    ops_f, Count.n = Count.n, 0
    with Count():
        out.sum().backward()
    ops_b = Count.n
    fwd, bwd = [], []
    for _ in range(REPS):          # on a GPU each pass is timed to its last kernel: max(host, GPU)
        sync()
        t0 = time.perf_counter()
        out = forward()
        sync()
        t1 = time.perf_counter()
        out.sum().backward()
        sync()
        bwd.append(time.perf_counter() - t1)
        fwd.append(t1 - t0)
    return {"fwd_s": statistics.median(fwd), "bwd_s": statistics.median(bwd), "ops_f": ops_f, "ops_b": ops_b}


def modelled(preset: str, system: str, ep: int) -> dict:
    """pipesim's GPU time of one layer (attention + MoE block, per micro-batch of 1 x 4096) and the
    host time its lockstep model exposes after the dispatcher's sync."""
    from pipesim import load_scenario
    from pipesim.whatif.validation_moe import error_budget
    nodes = max(1, ep // 8)
    s = load_scenario({"model": {"preset": preset, "seq_length": 4096}, "system": {"preset": system, "num_nodes": nodes},
                       "parallel": {"data": 8 * nodes, "expert": ep},
                       "training": {"micro_batch_size": 1, "global_batch_size": 8 * nodes, "precision": "bf16"}})
    b = error_budget(s, 1.0, 1.0)
    return {"local": s.model.num_experts // ep, "gpu_fb_s": b["fwd_s"] + b["bwd_s"], "host_s": b["host_fwd_s"]}


def main() -> None:
    try:
        torch = _setup()
    except ImportError:
        raise SystemExit("needs megatron-core: pip install --no-deps megatron-core==0.16.1") from None
    where = "CUDA" if torch.cuda.is_available() else "this CPU (CUDA stubbed)"
    print(f"Megatron-Core MoELayer on {where}, hidden {HIDDEN}, {TOKENS} tokens, top-{TOP_K}, torch "
          f"{torch.__version__}, 1 thread (median of {REPS}):")
    print("MoE block (router, dispatcher, experts):")
    print(f"{'local experts':>14} {'fwd ms':>8} {'bwd ms':>8} {'aten ops F/B':>13} {'us/op F':>8}")
    for e in LOCAL_EXPERTS:
        m = measure(e)
        print(f"{e:>14} {m['fwd_s'] * 1e3:8.2f} {m['bwd_s'] * 1e3:8.2f} {m['ops_f']:>6}/{m['ops_b']:<6} "
              f"{m['fwd_s'] / m['ops_f'] * 1e6:8.1f}")
    print("\nwhole TransformerLayer (norms, attention, MLP or MoE block):")
    for e in (None, 16):
        m = measure(e, whole_layer=True)
        print(f"{'dense' if e is None else f'{e} experts':>14} {m['fwd_s'] * 1e3:8.2f} {m['bwd_s'] * 1e3:8.2f} "
              f"{m['ops_f']:>6}/{m['ops_b']:<6} {m['fwd_s'] / m['ops_f'] * 1e6:8.1f}")
    print("\npipesim's model of one layer (attention + MoE block) per micro-batch of 4096 tokens, BF16:")
    print(f"{'model':>16} {'system':>12} {'EP':>4} {'local':>6} {'GPU F+B ms':>11} {'host exposed ms':>16}")
    for preset, system, ep in (("qwen3-30b-a3b", "dgx-h100", 8), ("qwen3-30b-a3b", "dgx-b200", 8),
                               ("qwen3-235b-a22b", "dgx-h100", 8), ("qwen3-235b-a22b", "dgx-h100", 32)):
        r = modelled(preset, system, ep)
        print(f"{preset:>16} {system:>12} {ep:>4} {r['local']:>6} {r['gpu_fb_s'] * 1e3:11.2f} {r['host_s'] * 1e3:16.3f}")


if __name__ == "__main__":
    main()
