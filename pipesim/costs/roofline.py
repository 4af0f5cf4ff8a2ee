"""Time of one op, from the best source available, and where it came from:

  "measured" / "interpolated"  a calibrated profile (costs.profile) has the op or its curve
  "gemm-curve"                 GEMMs by shape: tile/wave quantisation over the SMs up to the
                               published achievable peak (pipesim/costs/gemm.py)
  "attention-table"            fused attention from published kernel tables (costs/flash.py),
                               or a fused kernel's published rate (sparse MLA: costs/dsa.py)
  "memory-roofline"            memory-bound ops at the achievable HBM bandwidth
  "roofline"                   flat roofline: an explicit `gpu.matmul_efficiency` override, or a
                               GPU without kernel curves
  "fitted"                     a profile's fitted achieved throughput (ops it did not measure)

The GEMM curve and the attention tables were measured in short bursts at the boost clock; a
training step runs at the power limit, so their rates are scaled by the GPU's measured
sustained / burst ratio (presets/gpus.py `sustained_ratio`, or `gpu.sustained_ratio`).

Roofline (Williams, Waterman & Patterson 2009, "Roofline", Eq. 1):
    t = max(FLOPs / (peak · efficiency), bytes / (bandwidth · efficiency))
"""
from __future__ import annotations

from dataclasses import dataclass

from pipesim.costs.flash import attention_source, attention_tflops
from pipesim.costs.fp8 import block_scaled_fp8
from pipesim.costs.gemm import gemm_bytes, gemm_compute_time, out_bytes_of
from pipesim.costs.ops import Op, is_wgrad
from pipesim.presets.gpus import GENERIC_MATMUL_EFFICIENCY, curve, fill_rate, gemm_anchor, sustained_ratio
from pipesim.presets.systems import curve_peaks, preset_store_bandwidth
from pipesim.scenario.system_config import GPUSpec, matrix_peak_of


def tensor_core_rate(gpu: GPUSpec, precision: str, attention: str = "bf16",
                     attention_kernel: str | None = None) -> dict | None:
    """What the report states about the tensor-core rate: the sustained / burst ratio applied to
    the kernel curves (GEMMs at the precision's, fused attention at `attention`'s: costs/fp8.py
    attention_dtype), where it came from, and, given the fused-attention kernel, which measurement
    its rates are (`attention_table`). None when no curve applies: a flat `gpu.matmul_efficiency`,
    a custom GPU, a CPU."""
    c = curve(gpu.kernel_curve) if gpu.matmul_efficiency is None else None
    if c is None:
        return None
    dtype = precision if precision in c["mamf_tflops"] else "bf16"
    if gpu.sustained_ratio is not None:
        r = {"sustained_ratio": gpu.sustained_ratio, "attention_ratio": gpu.sustained_ratio,
             "from": "gpu.sustained_ratio"}
    else:
        r = {"sustained_ratio": sustained_ratio(c, dtype),
             "attention_ratio": sustained_ratio(c, "bf16" if attention == "bf16" else "fp8"),
             "from": f"kernel curve {gpu.kernel_curve}: sustained / burst matmul rate (presets/gpus.py)"}
    scale = peak_scale(gpu, dtype)
    if scale != 1.0:
        r["peak_scale"] = scale
    if attention_kernel in c["attention_kernels"] or attention_kernel == "auto":
        r["attention_table"] = attention_source(c, attention_kernel, attention)
    return r


def peak_scale(gpu: GPUSpec, dtype: str) -> float:
    """A scenario's matrix peak for `dtype` over the datasheet peak of the GPU its kernel curve was
    measured on (presets/systems.py curve_peaks): 1 for every preset; a user who sets
    `system.gpu.peak_tflops_<dtype>` on a curve's GPU (a hypothetical part, another power
    limit) scales its GEMM and attention rates with it instead of leaving them unchanged."""
    ref = curve_peaks(gpu.kernel_curve) if gpu.kernel_curve else None
    base = matrix_peak_of(ref, dtype) if ref else None
    return gpu.matrix_peak(dtype) / base if base else 1.0


def rate_text(r: dict) -> str:
    """The report's one line about `tensor_core_rate`."""
    if r["attention_ratio"] == r["sustained_ratio"]:
        rates = f"GEMM and attention at {r['sustained_ratio']:.3f}"
    else:
        rates = f"GEMMs at {r['sustained_ratio']:.3f}, attention at {r['attention_ratio']:.3f}"
    scaled = f", scaled x {r['peak_scale']:.3f} for the matrix peak set over the curve GPU's datasheet" \
        if "peak_scale" in r else ""
    return f"{rates} x the burst kernel tables ({r['from']}){scaled}"


@dataclass(frozen=True)
class OpTime:
    compute: float       # seconds at the compute roof
    memory: float        # seconds at the memory roof
    seconds: float       # the time used
    source: str          # see the module docstring

    @property
    def bound(self) -> str:
        return "compute" if self.compute >= self.memory else "memory"


class CostModel:
    """Times ops on one GPU type at one precision, optionally from a measured profile."""

    def __init__(self, gpu: GPUSpec, precision: str, profile=None, grad_bytes: int = 0,
                 attention_kernel: str = "auto", fp8_recipe: str | None = None, gemm_sm_margin: int = 0):
        """`grad_bytes`: element size of the gradient buffer that weight-gradient GEMMs
        accumulate into (0: the 16-bit C store of a plain GEMM). `attention_kernel`: which
        published fused-attention table times flash attention (`training.attention_kernel`).
        `fp8_recipe`: the run's FP8 recipe; under mxfp8 (and the MXFP8 GEMMs of an nvfp4 run)
        the FP8 GEMMs are block-scaled, at the curve's `mxfp8_gemm_rate` of per-tensor FP8.
        `gemm_sm_margin`: SMs the GEMMs leave free (training.gemm_sm_margin)."""
        self.gpu, self.precision, self.profile, self.grad_bytes = gpu, precision, profile, grad_bytes
        self.gemm_sm_margin = gemm_sm_margin
        self.block_scaled_fp8 = precision == "fp8" and block_scaled_fp8(fp8_recipe)
        # the kernel curves apply unless the user pinned a flat matmul efficiency
        self.curve = curve(gpu.kernel_curve) if gpu.matmul_efficiency is None else None
        self.attention_kernel = attention_kernel
        self._factors: dict[str, float] = {}
        if attention_kernel != "auto" and self.curve is not None and \
                attention_kernel not in self.curve["attention_kernels"]:
            from pipesim.errors import ScenarioError
            raise ScenarioError(f"training.attention_kernel: {attention_kernel!r} has no published table on "
                                f"{gpu.name}; known here: auto, {', '.join(sorted(self.curve['attention_kernels']))}")
        if gemm_sm_margin and (self.curve is None or gemm_sm_margin >= self.curve["sms"]):
            from pipesim.errors import ScenarioError
            why = (f"leaves no SM of {gpu.name}'s {self.curve['sms']} to the GEMMs" if self.curve else
                   f"needs a kernel curve's SM count; {gpu.name} is timed at a flat matmul efficiency")
            raise ScenarioError(f"training.gemm_sm_margin: {gemm_sm_margin} {why}")
        flat = gpu.matmul_efficiency if gpu.matmul_efficiency is not None else GENERIC_MATMUL_EFFICIENCY
        self._matmul_rate = gpu.matrix_peak(precision) * flat
        self._vector_rate = gpu.vector_peak(precision) * gpu.vector_efficiency
        self._mem_rate = gpu.hbm_bandwidth * gpu.memory_efficiency
        # the memory the GPU's curve GEMMs were timed with (a scenario's own bandwidth or efficiency
        # moves the tile epilogues, not the tensor rate the curve was calibrated to; every curve
        # is a preset GPU's, so the calibration always meets its anchor)
        self._anchor_mem_rate = (preset_store_bandwidth(gpu.name, gpu.kernel_curve) if gpu.kernel_curve else None) \
            or self._mem_rate
        self._fitted = False
        if profile is not None:
            achieved = profile.achieved("matmul")
            if achieved:
                self._matmul_rate, self.curve, self._fitted = achieved, None, True
            self._mem_rate = profile.achieved("memory") or self._mem_rate

    def roofline(self, flops: float, nbytes: float, kind: str) -> tuple[float, float]:
        rate = self._matmul_rate if kind == "matmul" else self._vector_rate
        return flops / rate, nbytes / self._mem_rate

    def time(self, op: Op, phase: str) -> OpTime:
        """phase: "fwd" or "bwd"."""
        flops = op.flops_fwd if phase == "fwd" else op.flops_bwd
        nbytes = op.bytes_fwd if phase == "fwd" else op.bytes_bwd
        compute, memory = self.roofline(flops, nbytes, op.kind)
        measured = self._measured(op.measure_fwd if phase == "fwd" else op.measure_bwd)
        gemms = op.gemms_fwd if phase == "fwd" else op.gemms_bwd
        if measured is not None:
            seconds, source = measured
        elif self.curve is not None and op.flash:
            _, seq, head_dim, causal, *fp8 = op.flash          # fp8: ("fp8" | "mxfp8",) under FP8 attention
            dtype = fp8[0] if fp8 else "bf16"
            factor = self.curve_factor("fp8" if fp8 else "bf16")
            mix = op.seq_mix or ((1.0, seq, op.window_seq),)      # document pieces: each at its length
            compute = sum(weight * flops / (attention_tflops(self.curve, length, causal, phase, self.attention_kernel,
                                                             head_dim, dtype, band) * factor * 1e12)
                          for weight, length, band in mix)
            seconds, source = max(compute, memory), "attention-table"
        elif self.curve is not None and op.fused_attention:
            compute = flops / (self.fused_rate(op.fused_attention, phase) * 1e12)
            seconds, source = max(compute, memory), "attention-table"
        elif self.curve is not None and gemms:
            compute = sum(self.gemm_time(*g) for g in gemms)
            seconds, source = max(compute, memory), "gemm-curve"
        elif self.curve is not None and op.kind == "vector":
            seconds, source = max(compute, memory), "memory-roofline"
        else:
            seconds, source = max(compute, memory), ("fitted" if self._fitted else "roofline")
        if not flops and not nbytes and measured is None:
            return OpTime(0.0, 0.0, 0.0, source)          # no kernel runs in this phase
        serial = op.serial_bytes_fwd if phase == "fwd" else op.serial_bytes_bwd
        if serial and measured is None:                  # a measurement already holds these passes
            memory += serial / self._mem_rate
            seconds += serial / self._mem_rate
        return OpTime(compute, memory, self.with_launch(seconds, op, phase), source)

    def fused_rate(self, spec: tuple, phase: str) -> float:
        """Sustained TFLOP/s of a fused kernel with its own published rate (Op.fused_attention):
        ("sparse_mla", useful share) the curve's sparse MLA rate; ("scores", useful share, seq,
        head_dim) the score half of a causal flash forward over `seq` keys (DSA's indexer: the
        same causal tiling and a per-score epilogue on the CUDA cores), at the GPU's attention
        table's forward rate."""
        kernel, useful, *shape = spec
        if kernel == "scores":
            seq, head_dim = shape
            base = attention_tflops(self.curve, seq, True, "fwd", self.attention_kernel, head_dim)
        else:
            base = self.curve[kernel][phase]
        return base * useful * self.curve_factor("bf16")

    def gemm_time(self, batch: float, m: float, n: float, k: float, dtype: str, role: str = "",
                  sms_less: int = 0) -> float:
        """One (batched) GEMM on the GPU's curve: max(tile/wave compute time, memory roof).
        role "wgrad": a weight gradient, accumulated into the gradient buffer in the GEMM's
        epilogue (beta = 1): Megatron-LM's gradient-accumulation fusion
        (megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication:
        fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32 / _fp16 into weight.main_grad;
        Transformer Engine's fuse_wgrad_accumulation, on by default in Megatron-Core). Every
        micro-batch reads and writes the buffer's elements instead of storing a 16-bit tile.
        `sms_less`: SMs it leaves to a communication kernel beside it, on top of the GEMM margin
        (Transformer Engine's Userbuffers set_sm_margin: costs/tp_overlap.py)."""
        c = self.curve
        dt = dtype if dtype in c["mamf_tflops"] else "bf16"
        shape, anchor = gemm_anchor(c, dt)
        out = out_bytes_of(dt, self.grad_bytes if role == "wgrad" else 0)
        compute = gemm_compute_time(m, n, k, batch, c["sms"], c["mamf_tflops"][dt] * 1e12,
                                    fill_rate(c), shape, c["persistent"], self._mem_rate, anchor, out,
                                    self._anchor_mem_rate, c["sms"] - self.gemm_sm_margin - sms_less
                                    ) / self.curve_factor(dt)
        if dt == "fp8" and self.block_scaled_fp8:
            compute /= c.get("mxfp8_gemm_rate", 1.0)
        return max(compute, gemm_bytes(m, n, k, dt, batch, out) / self._mem_rate)

    def sustained(self, dtype: str) -> float:
        """Sustained / burst tensor-core rate: the user's `gpu.sustained_ratio`, else the curve's."""
        if self.gpu.sustained_ratio is not None:
            return self.gpu.sustained_ratio
        return sustained_ratio(self.curve, dtype)

    def curve_factor(self, dtype: str) -> float:
        """What multiplies the curve's burst rates for `dtype`: the sustained ratio, times this GPU's
        matrix peak over that of the GPU the curve was measured on (peak_scale)."""
        f = self._factors.get(dtype)
        if f is None:
            f = self._factors[dtype] = self.sustained(dtype) * peak_scale(self.gpu, dtype)
        return f

    def wgrad_share(self, op: Op) -> float:
        """Share of the op's backward that computes weight gradients (the zero-bubble W): from its
        GEMMs' own times on the curve (a dW GEMM accumulating into an fp32 buffer outlasts its dX
        twin), the op's nominal split otherwise (a profile times the backward as a whole)."""
        nominal = 1 - op.dgrad_fraction
        if not nominal or self.curve is None or not op.gemms_bwd or self._measured(op.measure_bwd) is not None:
            return nominal
        times = [self.gemm_time(*g) for g in op.gemms_bwd]
        w = sum(t for t, g in zip(times, op.gemms_bwd) if is_wgrad(g))
        total = sum(times)
        return w / total if w and total else nominal

    def with_launch(self, kernel_seconds: float, op: Op, phase: str) -> float:
        """Each op launches one kernel forward and, with weights, two backward (input and weight
        gradients). On a GPU launches are queued ahead of the device, so an op lasts
        max(kernel, launch) (launch-bound only when tiny); a synchronous host pays both."""
        launch = (2 if phase == "bwd" and op.dgrad_fraction < 1 else 1) * self.gpu.kernel_launch
        if self.gpu.launch_overlaps:
            return max(kernel_seconds, launch)
        return kernel_seconds + launch

    def _measured(self, lookups) -> tuple[float, str] | None:
        if self.profile is None or not lookups:
            return None
        total, sources = 0.0, set()
        for key, shape in lookups:
            hit = self.profile.lookup(key, **shape)
            if hit is None:
                return None
            total += hit[0]
            sources.add(hit[1])
        return total, ("measured" if sources == {"measured"} else "interpolated")

    def memory_time(self, nbytes: float) -> float:
        return nbytes / self._mem_rate

    def quantize_time(self, numel: float, bits: int, direction: str) -> tuple[float, str]:
        """Quantize (read fp16, write packed) or dequantize: memory bound. Measured when the
        profile has it."""
        if self.profile is not None:
            hit = self.profile.lookup(direction, numel=int(numel), bits=bits)
            if hit is not None:
                return hit
        moved = numel * 2 + numel * bits / 8
        return self.memory_time(moved), "roofline"
