"""Compile every Triton kernel for an NVIDIA target (sm_90, Hopper) with the launch configs a
GPU run uses, without a GPU: the launchers run on CPU tensors with their kernels swapped for a
recorder, and the recorded arguments are compiled ahead of time down to a cubin. This catches
what the interpreter cannot (compiled-only semantics, shared-memory limits, dtype rules)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

# The compile must happen in a process where triton was imported without the interpreter
# (the kernel tests of this suite turn it on for their process), so it runs in a subprocess.
SCRIPT = textwrap.dedent(r'''
    import json, sys, torch, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import pipesim.kernels.attention_kernel as A
    import pipesim.kernels.dsa_indexer_kernel as D
    import pipesim.kernels.layer_norm_kernel as L
    import pipesim.kernels.mlp_kernel as M
    import pipesim.kernels.quantize_kernel as Q

    calls = []

    class Recorder:
        def __init__(self, fn):
            self.fn = fn
        def __getitem__(self, grid):
            return lambda *args, **kw: calls.append((self.fn, args, kw))

    for mod in (A, D, L, M, Q):
        for name in dir(mod):
            obj = getattr(mod, name)
            if isinstance(obj, triton.runtime.jit.JITFunction):
                setattr(mod, name, Recorder(obj))
    for mod in (A, D, L, M, Q):
        mod.launch = lambda kernel, tensor: kernel   # no CPU interpreter: only the recorder "runs"
    cfg_a, cfg_m = A._blocks, M._config
    A._blocks = lambda q, backward: cfg_a(q, backward, cuda=True)
    cfg_d = D._blocks
    D._blocks = lambda q: cfg_d(q, cuda=True)
    M._config = lambda a, m, n, k: cfg_m(a, m, n, k, cuda=True)

    TY = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16",
          torch.int8: "*i8", torch.uint8: "*u8"}
    dtype = torch.bfloat16
    t = lambda *s: torch.randn(*s).to(dtype)
    q = t(1, 2, 100, 128)
    o, lse = A.attention_fwd(q, q, q, True, 0.1)
    A.attention_bwd(q, q, q, q, q, torch.zeros(2, 100), True, 0.1)
    D.index_scores(t(1, 100, 64, 128), t(1, 100, 128), torch.randn(1, 100, 64))   # DeepSeek-V3.2's indexer
    x = t(50, 4096)
    L.layer_norm_fwd(x, t(4096), t(4096), 1e-5)
    L.layer_norm_bwd(x, x, t(4096), torch.zeros(50), torch.ones(50))
    M.matmul(t(64, 96), t(96, 80), bias=t(80), activation="gelu", store_pre=True)
    M.matmul(t(64, 96), t(96, 80), act_grad_of=t(64, 80), activation="gelu")
    # fp32 operands take the IEEE dot path
    M.matmul(torch.randn(64, 96), torch.randn(96, 80))
    for bits in (12, 8, 4):   # each bit width is its own constexpr branch
        qt = Q.QuantizedTensor(torch.zeros(Q.packed_bytes(1000, bits), dtype=torch.int8 if bits == 8 else torch.uint8),
                               torch.ones(8), (1000,), bits, 128, torch.float32)
        Q.quantize(torch.randn(1000), bits, impl="triton")
        Q.dequantize(qt, impl="triton")

    target = GPUTarget("cuda", 90, 32)
    done = []
    for fn, args, kw in calls:
        names = fn.arg_names
        constexpr_names = {p.name for p in fn.params if p.is_constexpr}
        sig, consts = {}, {}
        for n, a in zip(names, args):
            if isinstance(a, torch.Tensor):
                sig[n] = TY[a.dtype]
            elif isinstance(a, bool):
                sig[n] = "i1"
            elif isinstance(a, int):
                sig[n] = "i32"
            else:
                sig[n] = "fp32"
        opts = {}
        for n, v in kw.items():
            if n in constexpr_names:
                sig[n] = "constexpr"
                consts[n] = v
            else:
                opts[n] = v
        sig = {n: sig[n] for n in names}
        k = triton.compile(ASTSource(fn, sig, consts), target=target, options=opts)
        assert "cubin" in k.asm
        done.append(fn.__name__ + json.dumps(consts, sort_keys=True, default=str))
    print(json.dumps(sorted(set(done))))
''')


def _has_nvidia_backend() -> bool:
    try:
        import triton.backends
        return "nvidia" in triton.backends.backends
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _has_nvidia_backend(), reason="triton without the NVIDIA backend")
def test_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    compiled = json.loads(proc.stdout.strip().splitlines()[-1])
    names = {c.split("{")[0] for c in compiled}
    expected = {"_attn_fwd_kernel", "_attn_bwd_dkdv_kernel", "_attn_bwd_dq_kernel", "_index_scores_kernel",
                "_ln_fwd_kernel",
                "_ln_bwd_kernel", "_matmul_kernel", "_quant_kernel", "_dequant_kernel"}
    assert expected <= names, expected - names
    assert len(compiled) == 5 + 3 + 6 + 1   # attention 3, layer norm 2, matmul 3, (de)quantize 2 x 3, indexer 1
