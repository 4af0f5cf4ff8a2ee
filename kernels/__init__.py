"""Triton kernels, shipped as `pipesim.kernels` (one file per kernel: the @triton.jit kernel(s),
the launcher, a torch reference beside it and an autograd.Function where there is a backward).

    from pipesim.kernels import attention, mlp, layer_norm, quantize, dequantize, index_scores

The submodules import torch and triton, so they load on first use of a name here. CUDA tensors
run the compiled kernels. CPU tensors run in Triton's interpreter (TRITON_INTERPRET=1 before
triton is imported, or automatically otherwise; see _common.launch): for correctness tests, not
timing. quantize/dequantize default to an identical torch path on CPU (impl="triton" forces
the kernel).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "attention": "attention",
    "mlp": "mlp",
    "layer_norm": "layer_norm",
    "quantize": "quantize",
    "dequantize": "quantize",
    "QuantizedTensor": "quantize",
    "index_scores": "dsa_indexer",
}

__all__ = ["attention", "mlp", "layer_norm", "quantize", "dequantize", "QuantizedTensor", "index_scores"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipesim.kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}_kernel"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
