"""FP8 / FP4 recipes at the kernel level: pipesim's GEMM curve and cast ops against Transformer
Engine's own GEMM profiling guide, so a reader sees whether the low-precision GEMMs and the
quantization around them are costed right, recipe by recipe.

    .venv/bin/python benchmarks/fp8_recipe_gemms.py

Source (a kernel benchmark, never used to set a cost): NVIDIA/TransformerEngine
docs/examples/gemm_profiling/gemm_profiling.rst (PR #2863, May 2026; benchmarks/gemm/
benchmark_gemm.py), a 5B layer (hidden 4096, MLP 16384, 32 heads, M = 31 x 512 = 15,872 tokens):
the twelve GEMMs of a layer (4 Fprop, 4 Dgrad, 4 Wgrad shapes), each timed over 100 back-to-back
calls with CUDA events,
  - pre-quantized: the GEMM kernel alone (tex.generic_gemm on operands quantized beforehand);
  - autocast: a te.Linear forward under te.autocast -- the GEMM plus the quantization of its input
    and its weight, as training runs it.
On an NVIDIA B300 SXM6 (BF16, FP8 current scaling, MXFP8, NVFP4) and an H200 NVL (BF16, FP8
current scaling; the 600 W PCIe card, so only its FP8 / BF16 ratio is compared: pipesim's H200 is
the 700 W SXM). The GEMMs are taken at pipesim's sustained rate (presets/gpus.py sustained_ratio),
as in a training step: the guide's BF16 rate, 1.50 PF/s, is B300's MAMF (1769) times Blackwell's
sustained ratio within 3 %, and pipesim's burst curve reads 15-18 % faster than every pass.
Delayed scaling has no pre-quantized mode (its amax history needs the autocast path) and is left out.

1. GEMMs alone (pre-quantized), per pass of the layer, ms. MXFP8's rate relative to per-tensor FP8
   is taken from these very totals (presets/gpus.py _MXFP8_GEMM_RATE), so for MXFP8 only the
   spread between passes is a test.
2. The quantization (autocast - pre-quantized) against pipesim's cast ops: the input (M x K) and
   the weight (K x N) of every GEMM at pipesim/costs/fp8.py cast_bytes per element, at the memory
   roof, one launch per cast.
"""
from __future__ import annotations

from kernel_curves import LAUNCH, MEMORY_EFFICIENCY, gemm_tflops

from pipesim.costs.fp8 import cast_bytes
from pipesim.presets.gpus import KERNEL_CURVES, sustained_ratio

M = 15872
PASSES = {
    "Fprop": ((M, 4096, 12288), (M, 4096, 4096), (M, 4096, 16384), (M, 16384, 4096)),
    "Dgrad": ((M, 12288, 4096), (M, 4096, 4096), (M, 16384, 4096), (M, 4096, 16384)),
    "Wgrad": ((4096, M, 12288), (4096, M, 4096), (4096, M, 16384), (16384, M, 4096)),
}
# per pass (Fprop, Dgrad, Wgrad), ms; the guide's "Per-Layer GEMM Time" tables
B300_PREQUANT = {"bf16": (4.250, 4.434, 4.418), "tensorwise": (2.158, 2.329, 2.325),
                 "mxfp8": (2.365, 2.397, 2.400), "nvfp4": (1.254, 1.305, 1.205)}
B300_AUTOCAST = {"bf16": (4.196, 4.290, 4.272), "tensorwise": (2.879, 3.063, 3.205),
                 "mxfp8": (2.847, 3.045, 3.092), "nvfp4": (1.932, 2.189, 2.331)}
H200NVL_PREQUANT = {"bf16": (10.632, 10.747, 10.530), "tensorwise": (5.577, 5.661, 5.547)}
H200NVL_AUTOCAST = {"bf16": (10.653, 10.813, 10.548), "tensorwise": (6.503, 6.795, 6.987)}
HBM = {"b300": 8.0e12, "h200": 4.8e12}
DTYPE = {"bf16": "bf16", "tensorwise": "fp8", "mxfp8": "fp8", "nvfp4": "fp4"}


def gemm_ms(gpu: str, recipe: str, shapes) -> float:
    """The pass's GEMMs on pipesim's curve at the sustained rate, ms (M x K times K x N); MXFP8
    at the curve's block-scaled rate (roofline.CostModel.gemm_time)."""
    c, dtype = KERNEL_CURVES[gpu], DTYPE[recipe]
    burst = sum(2 * m * k * n / (gemm_tflops(c, 1, m, n, k, dtype, HBM[gpu]) * 1e12) for m, k, n in shapes)
    block_scaled = c.get("mxfp8_gemm_rate", 1.0) if recipe == "mxfp8" else 1.0
    return 1e3 * burst / sustained_ratio(c, dtype) / block_scaled


def cast_ms(gpu: str, recipe: str, shapes) -> float:
    """pipesim's casts of every GEMM's input and weight in the pass, ms."""
    per = cast_bytes(recipe, gpu)
    rate = HBM[gpu] * MEMORY_EFFICIENCY
    return 1e3 * sum((m * k + k * n) * per / rate + 2 * LAUNCH for m, k, n in shapes)


def err(pred: float, pub: float) -> str:
    return f"{100 * (pred / pub - 1):+6.1f}"


def main() -> None:
    print("1. GEMMs alone (pre-quantized), ms per pass of the layer: pipesim at the sustained rate vs TE's guide")
    print(f"   {'GPU':>8} {'recipe':>10} {'pass':>6} {'pipesim':>8} {'TE':>8} {'err %':>6}")
    for recipe, pub in B300_PREQUANT.items():
        for (name, shapes), p in zip(PASSES.items(), pub):
            pred = gemm_ms("b300", recipe, shapes)
            print(f"   {'B300':>8} {recipe:>10} {name:>6} {pred:>8.3f} {p:>8.3f} {err(pred, p)}")
    print("   H200 NVL (600 W; pipesim's H200 is the 700 W SXM): FP8 / BF16 speed-up of the GEMMs")
    for (name, shapes), b, f in zip(PASSES.items(), H200NVL_PREQUANT["bf16"], H200NVL_PREQUANT["tensorwise"]):
        pred = gemm_ms("h200", "bf16", shapes) / gemm_ms("h200", "tensorwise", shapes)
        print(f"   {'H200':>8} {'tensorwise':>10} {name:>6} {pred:>8.2f}x {b / f:>7.2f}x {err(pred, b / f)}")
    print()
    print("2. Quantization of the GEMMs' inputs and weights (autocast - pre-quantized), ms per pass")
    print(f"   {'GPU':>8} {'recipe':>10} {'pass':>6} {'pipesim':>8} {'TE':>8} {'err %':>6}")
    for gpu, auto, pre in (("b300", B300_AUTOCAST, B300_PREQUANT), ("h200", H200NVL_AUTOCAST, H200NVL_PREQUANT)):
        for recipe in auto:
            if recipe == "bf16":
                continue
            for (name, shapes), a, p in zip(PASSES.items(), auto[recipe], pre[recipe]):
                pred = cast_ms(gpu, recipe, shapes)
                label = "B300" if gpu == "b300" else "H200 NVL"
                print(f"   {label:>8} {recipe:>10} {name:>6} {pred:>8.3f} {a - p:>8.3f} {err(pred, a - p)}")
    print("   (H200 NVL: pipesim at the SXM's 4.8 TB/s, the NVL card has the same HBM3e)")


if __name__ == "__main__":
    main()
