"""Runnable ops for `pipesim calibrate`: for an (op, shape) pair, build the inputs once and return
a zero-argument callable that performs one call of the op.

On CUDA the callables launch the Triton kernels of pipesim.kernels (what a GPU run would use); on
CPU they run the same op in torch with one thread, which is what the CPU emulator executes.
"""
from __future__ import annotations

from typing import Callable

_TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def torch_dtype(name: str):
    import torch
    if name not in _TORCH_DTYPES:
        raise ValueError(f"dtype {name!r} cannot be measured here (one of {sorted(_TORCH_DTYPES)})")
    return getattr(torch, _TORCH_DTYPES[name])


def make_runner(op: str, shape: dict, device: str) -> tuple[Callable[[], object], str]:
    """(callable, impl) for one call of `op` at `shape`; impl is "triton" or "torch"."""
    import torch
    torch.manual_seed(0)
    builder = _BUILDERS.get(op)
    if builder is None:
        raise ValueError(f"no runner for op {op!r}")
    return builder(shape, torch.device(device))


def _gemm(s, dev):
    import torch
    dt = torch_dtype(s["dtype"])
    a = torch.randn(s["m"], s["k"], device=dev, dtype=dt)
    b = torch.randn(s["k"], s["n"], device=dev, dtype=dt)
    if dev.type == "cuda":
        from pipesim.kernels.mlp_kernel import matmul
        return (lambda: matmul(a, b)), "triton"
    return (lambda: torch.matmul(a, b)), "torch"


def _qkv(s, dev, grad):
    import torch
    dt = torch_dtype(s["dtype"])
    shape = (s["batch"], s["heads"], s["seq"], s["head_dim"])
    return [torch.randn(shape, device=dev, dtype=dt, requires_grad=grad) for _ in range(3)]


def _attention_fwd(s, dev):
    import torch
    q, k, v = _qkv(s, dev, grad=False)
    causal = bool(s["causal"])
    if dev.type == "cuda":
        from pipesim.kernels.attention_kernel import attention_fwd
        scale = q.shape[-1] ** -0.5
        return (lambda: attention_fwd(q, k, v, causal, scale)), "triton"
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return (lambda: sdpa(q, k, v, is_causal=causal)), "torch"


def _attention_bwd(s, dev):
    import torch
    causal = bool(s["causal"])
    if dev.type == "cuda":
        from pipesim.kernels.attention_kernel import attention_bwd, attention_fwd
        q, k, v = _qkv(s, dev, grad=False)
        scale = q.shape[-1] ** -0.5
        o, lse = attention_fwd(q, k, v, causal, scale)
        do = torch.randn_like(o)
        return (lambda: attention_bwd(do, q, k, v, o, lse, causal, scale)), "triton"
    q, k, v = _qkv(s, dev, grad=True)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    do = torch.randn_like(o)
    return (lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)), "torch"


def _ln_inputs(s, dev, grad):
    import torch
    dt = torch_dtype(s["dtype"])
    x = torch.randn(s["rows"], s["cols"], device=dev, dtype=dt, requires_grad=grad)
    w = torch.randn(s["cols"], device=dev, dtype=dt, requires_grad=grad)
    b = torch.randn(s["cols"], device=dev, dtype=dt, requires_grad=grad)
    return x, w, b


def _layer_norm_fwd(s, dev):
    import torch
    x, w, b = _ln_inputs(s, dev, grad=False)
    if dev.type == "cuda":
        from pipesim.kernels.layer_norm_kernel import layer_norm_fwd
        return (lambda: layer_norm_fwd(x, w, b, 1e-5)), "triton"
    return (lambda: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)), "torch"


def _layer_norm_bwd(s, dev):
    import torch
    if dev.type == "cuda":
        from pipesim.kernels.layer_norm_kernel import layer_norm_bwd, layer_norm_fwd
        x, w, b = _ln_inputs(s, dev, grad=False)
        y, mean, rstd = layer_norm_fwd(x, w, b, 1e-5)
        dy = torch.randn_like(y)
        return (lambda: layer_norm_bwd(dy, x, w, mean, rstd)), "triton"
    x, w, b = _ln_inputs(s, dev, grad=True)
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
    dy = torch.randn_like(y)
    return (lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)), "torch"


def _gelu_fwd(s, dev):
    import torch
    x = torch.randn(s["numel"], device=dev, dtype=torch_dtype(s["dtype"]))
    # the exact (erf) GELU, as the emulator's model computes it (torch.nn.functional.gelu default)
    return (lambda: torch.nn.functional.gelu(x)), "torch"


def _gelu_bwd(s, dev):
    import torch
    x = torch.randn(s["numel"], device=dev, dtype=torch_dtype(s["dtype"]), requires_grad=True)
    y = torch.nn.functional.gelu(x)
    dy = torch.randn_like(y)
    return (lambda: torch.autograd.grad(y, (x,), dy, retain_graph=True)), "torch"


def _mlp_inputs(s, dev, grad):
    import torch
    dt = torch_dtype(s["dtype"])
    t, h, f = s["tokens"], s["hidden"], s["ffn"]
    mk = lambda *shape, scale=1.0: (torch.randn(*shape, device=dev, dtype=dt) * scale).requires_grad_(grad)
    return (mk(t, h), mk(h, f, scale=h ** -0.5), mk(f), mk(f, h, scale=f ** -0.5), mk(h))


def _mlp_torch(x, w1, b1, w2, b2):
    import torch
    return torch.nn.functional.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2


def _mlp_fwd(s, dev):
    args = _mlp_inputs(s, dev, grad=False)
    if dev.type == "cuda":
        from pipesim.kernels.mlp_kernel import mlp
        return (lambda: mlp(*args)), "triton"
    return (lambda: _mlp_torch(*args)), "torch"


def _mlp_bwd(s, dev):
    import torch
    args = _mlp_inputs(s, dev, grad=True)
    if dev.type == "cuda":
        from pipesim.kernels.mlp_kernel import mlp
        y, impl = mlp(*args), "triton"
    else:
        y, impl = _mlp_torch(*args), "torch"
    dy = torch.randn_like(y)
    return (lambda: torch.autograd.grad(y, args, dy, retain_graph=True)), impl


def _bits(s):
    b = s["bits"]
    return b if b == "fp8" else int(b)


def _quantize(s, dev):
    import torch
    from pipesim.kernels.quantize_kernel import quantize
    x = torch.randn(s["numel"], device=dev)
    bits = _bits(s)
    return (lambda: quantize(x, bits)), ("torch" if dev.type == "cpu" or bits == "fp8" else "triton")


def _dequantize(s, dev):
    import torch
    from pipesim.kernels.quantize_kernel import dequantize, quantize
    bits = _bits(s)
    q = quantize(torch.randn(s["numel"], device=dev), bits)
    return (lambda: dequantize(q)), ("torch" if dev.type == "cpu" or bits == "fp8" else "triton")


def _copy(s, dev):
    import torch
    n = int(s["bytes"])
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), "torch"


def _bmm(s, dev):
    import torch
    dt = torch_dtype(s["dtype"])
    a = torch.randn(s["batch"], s["m"], s["k"], device=dev, dtype=dt)
    b = torch.randn(s["batch"], s["k"], s["n"], device=dev, dtype=dt)
    if s["bias"]:      # the emulator's logits: baddbmm with the causal mask as a broadcast bias
        bias = torch.zeros(s["m"], s["n"], device=dev, dtype=dt)
        return (lambda: torch.baddbmm(bias, a, b, beta=1.0, alpha=0.125)), "torch"
    return (lambda: torch.bmm(a, b)), "torch"


def _bias_fwd(s, dev):
    import torch
    dt = torch_dtype(s["dtype"])
    out = torch.empty(s["rows"], s["cols"], device=dev, dtype=dt)
    bias = torch.randn(s["cols"], device=dev, dtype=dt)
    return (lambda: out.copy_(bias.expand_as(out))), "torch"


def _bias_bwd(s, dev):
    import torch
    dt = torch_dtype(s["dtype"])
    gy = torch.randn(s["rows"], s["cols"], device=dev, dtype=dt)
    grad = torch.zeros(s["cols"], device=dev, dtype=dt)
    return (lambda: grad.add_(gy.sum(0))), "torch"


def _softmax_fwd(s, dev):
    import torch
    x = torch.randn(s["rows"], s["cols"], device=dev, dtype=torch_dtype(s["dtype"]))
    return (lambda: torch.softmax(x, dim=-1)), "torch"


def _softmax_bwd(s, dev):
    import torch
    x = torch.randn(s["rows"], s["cols"], device=dev, dtype=torch_dtype(s["dtype"]), requires_grad=True)
    y = torch.softmax(x, dim=-1)
    dy = torch.randn_like(y)
    return (lambda: torch.autograd.grad(y, (x,), dy, retain_graph=True)), "torch"


def _ce_inputs(s, dev):
    import torch
    logits = torch.randn(s["tokens"], s["vocab"], device=dev, requires_grad=True)
    target = torch.randint(0, s["vocab"], (s["tokens"],), device=dev)
    return logits, target


def _cross_entropy_fwd(s, dev):
    import torch
    logits, target = _ce_inputs(s, dev)
    return (lambda: torch.nn.functional.cross_entropy(logits.detach(), target)), "torch"


def _cross_entropy_bwd(s, dev):
    import torch
    logits, target = _ce_inputs(s, dev)
    loss = torch.nn.functional.cross_entropy(logits, target)
    return (lambda: torch.autograd.grad(loss, (logits,), retain_graph=True)), "torch"


def _ring_block_inputs(s, dev):
    import torch
    from pipesim.emulator.context import causal_mask
    dt = torch_dtype(s["dtype"])
    b, nq, nk, d = s["batch"], s["q"], s["k"], s["head_dim"]
    q = torch.randn(b, nq, d, device=dev, dtype=dt)
    k, v = (torch.randn(b, nk, d, device=dev, dtype=dt) for _ in range(2))
    # the mask of the diagonal step (queries and keys at the same positions); any step's mask
    # costs the same to build and add
    mask = (lambda: causal_mask(torch.arange(nq), torch.arange(nk), q)) if s["causal"] else (lambda: None)
    return q, k, v, mask, d ** -0.5


def _ring_block_fwd(s, dev):
    from pipesim.emulator.context import block_forward
    q, k, v, mask, scale = _ring_block_inputs(s, dev)
    return (lambda: block_forward(q, k, v, scale, mask())), "torch"


def _ring_block_bwd(s, dev):
    import torch
    from pipesim.emulator.context import block_backward, block_forward
    q, k, v, mask, scale = _ring_block_inputs(s, dev)
    out, lse = block_forward(q, k, v, scale, mask())
    dout = torch.randn_like(out)
    delta = (dout * out).sum(-1, keepdim=True)
    return (lambda: block_backward(q, k, v, dout, lse, delta, scale, mask())), "torch"


def _ssd_inputs(s, dev, grad):
    import torch
    if dev.type == "cuda":     # the GPU kernel is mamba_ssm's, costed on the GEMM curve instead
        raise ValueError("the scan has a CPU (emulator) runner only")
    dt_ = torch_dtype(s["dtype"])
    b, n, h, p, q = s["batch"], s["seq"], s["heads"], s["head_dim"], s["state"]
    r = lambda *shape: torch.randn(*shape, device=dev, dtype=dt_, requires_grad=grad)
    dt = torch.rand(n, b, h, device=dev, dtype=dt_, requires_grad=grad)
    return r(n, b, h, p), dt, -torch.rand(h, device=dev, dtype=dt_), r(n, b, h, q), r(n, b, h, q), r(h)


def _ssd_fwd(s, dev):
    from pipesim.emulator.mamba import ssd_chunked
    args = _ssd_inputs(s, dev, grad=False)
    return (lambda: ssd_chunked(*args, s["chunk"])), "torch"


def _ssd_bwd(s, dev):
    """The scan's backward as the emulator runs it: re-run the forward (it keeps only its inputs),
    then the gradients."""
    import torch
    from pipesim.emulator.mamba import ssd_chunked
    x, dt, A, B, C, D = _ssd_inputs(s, dev, grad=True)
    dy = torch.randn(x.shape, device=dev, dtype=x.dtype)
    return (lambda: torch.autograd.grad(ssd_chunked(x, dt, A, B, C, D, s["chunk"]), (x, dt, B, C), dy)), "torch"


def _gdn_inputs(s, dev, grad):
    import torch
    import torch.nn.functional as F
    if dev.type == "cuda":     # the GPU kernel is FLA's, costed on the GEMM curve instead
        raise ValueError("the delta rule has a CPU (emulator) runner only")
    dt_ = torch_dtype(s["dtype"])
    n, b, h, dk, dv = s["seq"], s["batch"], s["heads"], s["key_dim"], s["value_dim"]
    qk = [F.normalize(torch.randn(n, b, h, dk, device=dev, dtype=dt_), dim=-1).requires_grad_(grad)
          for _ in range(2)]
    v = torch.randn(n, b, h, dv, device=dev, dtype=dt_, requires_grad=grad)
    g = (-torch.rand(n, b, h, device=dev, dtype=dt_)).requires_grad_(grad)
    beta = torch.rand(n, b, h, device=dev, dtype=dt_, requires_grad=grad)
    return (*qk, v, g, beta), dk ** -0.5


def _gdn_fwd(s, dev):
    from pipesim.emulator.gated_delta import delta_rule
    args, scale = _gdn_inputs(s, dev, grad=False)
    return (lambda: delta_rule(*args, scale)), "torch"


def _gdn_bwd(s, dev):
    """As the emulator runs it: the rule re-run (it keeps only its inputs), then the gradients."""
    import torch
    from pipesim.emulator.gated_delta import delta_rule
    args, scale = _gdn_inputs(s, dev, grad=True)
    do = torch.randn_like(args[2])
    return (lambda: torch.autograd.grad(delta_rule(*args, scale), args, do)), "torch"


def _conv_inputs(s, dev, grad):
    import torch
    if dev.type == "cuda":
        raise ValueError("the Mamba conv has a CPU (emulator) runner only")
    dt_ = torch_dtype(s["dtype"])
    u = torch.randn(1, s["channels"], s["tokens"], device=dev, dtype=dt_, requires_grad=grad)
    w = torch.randn(s["channels"], 1, s["kernel"], device=dev, dtype=dt_)
    return u, w


def _conv_run(u, w):
    import torch.nn.functional as F
    return F.silu(F.conv1d(F.pad(u, (w.shape[-1] - 1, 0)), w, groups=w.shape[0]))


def _conv1d_fwd(s, dev):
    u, w = _conv_inputs(s, dev, grad=False)
    return (lambda: _conv_run(u, w)), "torch"


def _conv1d_bwd(s, dev):
    import torch
    u, w = _conv_inputs(s, dev, grad=True)
    y = _conv_run(u, w)
    dy = torch.randn_like(y)
    return (lambda: torch.autograd.grad(y, (u,), dy, retain_graph=True)), "torch"


def _dsa_index_scores(s, dev):
    """DSA's lightning-indexer scores: the Triton kernel on CUDA, its torch reference on CPU."""
    import torch
    from pipesim.kernels.dsa_indexer_kernel import index_scores, index_scores_reference
    dt = torch_dtype(s["dtype"])
    B, S, H, D = s["batch"], s["seq"], s["heads"], s["head_dim"]
    q = torch.randn(B, S, H, D, device=dev, dtype=dt)
    k = torch.randn(B, S, D, device=dev, dtype=dt)
    w = torch.randn(B, S, H, device=dev)
    if dev.type == "cuda":
        return (lambda: index_scores(q, k, w)), "triton"
    return (lambda: index_scores_reference(q, k, w)), "torch"


_BUILDERS = {
    "gemm": _gemm, "attention_fwd": _attention_fwd, "attention_bwd": _attention_bwd,
    "layer_norm_fwd": _layer_norm_fwd, "layer_norm_bwd": _layer_norm_bwd,
    "gelu_fwd": _gelu_fwd, "gelu_bwd": _gelu_bwd, "mlp_fwd": _mlp_fwd, "mlp_bwd": _mlp_bwd,
    "quantize": _quantize, "dequantize": _dequantize, "copy": _copy,
    "bmm": _bmm, "softmax_fwd": _softmax_fwd, "softmax_bwd": _softmax_bwd,
    "bias_fwd": _bias_fwd, "bias_bwd": _bias_bwd,
    "cross_entropy_fwd": _cross_entropy_fwd, "cross_entropy_bwd": _cross_entropy_bwd,
    "ring_block_fwd": _ring_block_fwd, "ring_block_bwd": _ring_block_bwd,
    "ssd_fwd": _ssd_fwd, "ssd_bwd": _ssd_bwd, "conv1d_fwd": _conv1d_fwd, "conv1d_bwd": _conv1d_bwd,
    "gdn_fwd": _gdn_fwd, "gdn_bwd": _gdn_bwd, "dsa_index_scores": _dsa_index_scores,
}
COMPUTE_OPS = tuple(_BUILDERS)
