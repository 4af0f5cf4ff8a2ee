"""Measured cost profiles (written by `pipesim calibrate`, read by the cost model).

File format, version 1 (JSON)::

    {
      "version": 1,
      "device": {"name": "NVIDIA H100 80GB HBM3", "kind": "cuda" | "cpu",
                 "torch": "2.x", "triton": "3.x", "driver": "..." | null, "python": "3.11.x",
                 "threads": 1, "date": "2026-11-21T09:00:00+00:00"},
      "created": "2026-11-21T09:00:00+00:00",
      "measurements": [
        {"op": "gemm", "shape": {"m": 512, "n": 512, "k": 512, "dtype": "fp32"},
         "median_s": 1.2e-3, "p10_s": 1.1e-3, "p90_s": 1.4e-3, "n": 25,
         "tflops": 0.22, "gbps": null, "impl": "torch"},
        ...
      ]
    }

Times are seconds for one call. `tflops` is 1e12 FLOP/s and `gbps` 1e9 bytes/s achieved at the
median (null where the op has no FLOP or byte count that means anything); the optional `impl`
says what ran ("triton" kernels or "torch" ops). `device.notes` lists what was not measured. Op keys and their shape
keywords are listed in OPS below; dtype names are "fp32", "fp16", "bf16", "fp8".

Lookup: an exact shape match is "measured". Otherwise, among points of the same op with the same
categorical keys (dtype, causal, bits, ranks), time is interpolated in log-log space against the
op's work (FLOPs or bytes) between the nearest measured works below and above, or, outside the
measured range, extrapolated at the nearest point's achieved throughput (time ∝ work); the source
is then "interpolated". Ops (or categorical values) never measured give None, and the cost model
falls back to its roofline with efficiencies from `achieved()`.
"""
from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipesim.errors import ProfileError

PROFILE_VERSION = 1

# Bytes per element of the dtype names used in shapes.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
_DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
                  "bfloat16": "bf16", "float8": "fp8", "float8_e4m3fn": "fp8", "e4m3": "fp8"}


def _elem(shape: dict) -> int:
    return DTYPE_BYTES.get(shape.get("dtype", "fp32"), 4)


# --- work (FLOPs or bytes) per op, the x axis of the log-log interpolation -----------------------
# The exact constant does not matter for interpolation within one op (it cancels); it matters for
# the tflops/gbps fields and for achieved(), so each count cites where it comes from.

def _gemm_flops(s):
    # 2·m·n·k: one multiply and one add per MAC (Kaplan et al. 2020, "Scaling Laws", Sec. 2.1).
    return 2.0 * s["m"] * s["n"] * s["k"]


def _attn_fwd_flops(s):
    # Q·K^T and P·V, each 2·b·h·s²·d; causal does half the work
    # (Dao 2023, FlashAttention-2, Sec. 4.1 benchmark FLOP count).
    f = 4.0 * s["batch"] * s["heads"] * s["seq"] ** 2 * s["head_dim"]
    return f / 2 if s.get("causal") else f


def _attn_bwd_flops(s):
    # Backward = 2.5 × forward FLOPs: dV, dP, dQ, dK matmuls plus the recomputed Q·K^T
    # (Dao 2023, FlashAttention-2, Sec. 4.1).
    return 2.5 * _attn_fwd_flops(s)


def _ring_block_flops(s):
    # The CPU emulator's ring-attention step (pipesim/emulator/context.py block_forward): Q·K^T
    # and P·V over the whole q x k block, masked entries included: 4·batch·q·k·d.
    return 4.0 * s["batch"] * s["q"] * s["k"] * s["head_dim"]


def _ring_block_bwd_flops(s):
    # block_backward: the scores recomputed, dP, dQ, dK, dV: 5 GEMMs of 2·batch·q·k·d.
    return 2.5 * _ring_block_flops(s)


def _mlp_fwd_flops(s):
    # Two GEMMs tokens×hidden×ffn: 2·2·t·h·f (Narayanan et al. 2021, Megatron-LM, Eq. 3 MLP term).
    return 4.0 * s["tokens"] * s["hidden"] * s["ffn"]


def _mlp_bwd_flops(s):
    # Backward = 2 × forward (input- and weight-gradient GEMMs; Narayanan et al. 2021, Sec. 5.1).
    return 2.0 * _mlp_fwd_flops(s)


def _ln_fwd_bytes(s):
    # Read x, write y (the per-column weight and bias are negligible next to rows·cols).
    return 2.0 * s["rows"] * s["cols"] * _elem(s)


def _ln_bwd_bytes(s):
    # Read x and dy, write dx.
    return 3.0 * s["rows"] * s["cols"] * _elem(s)


def _eltwise_fwd_bytes(s):
    return 2.0 * s["numel"] * _elem(s)


def _eltwise_bwd_bytes(s):
    return 3.0 * s["numel"] * _elem(s)


def _quant_bytes(s):
    # Read the fp32 source (4 bytes) and write bits/8 packed bytes per element (scales negligible);
    # bits "fp8" is 8 bits.
    bits = 8.0 if s["bits"] == "fp8" else float(s["bits"])
    return s["numel"] * (4.0 + bits / 8.0)


def _copy_bytes(s):
    # A copy reads and writes every byte (McCalpin, STREAM "Copy" counts 2 words per element).
    return 2.0 * s["bytes"]


def _p2p_bytes(s):
    return float(s["bytes"])


def _allreduce_bus_bytes(s):
    # Ring all-reduce moves 2(n-1)/n of the buffer per rank ("bus bandwidth", NCCL-tests
    # doc/PERFORMANCE.md; Patarasuk & Yuan 2009, Sec. 3).
    n = s["ranks"]
    return 2.0 * (n - 1) / n * s["bytes"] if n > 1 else float(s["bytes"])


def _bmm_flops(s):
    # Batched GEMM: 2·batch·m·n·k (Kaplan et al. 2020, Sec. 2.1, per matrix of the batch).
    return 2.0 * s["batch"] * s["m"] * s["n"] * s["k"]


def _softmax_fwd_bytes(s):
    # Read the scores, write the probabilities (row max and sum stay in registers).
    return 2.0 * s["rows"] * s["cols"] * _elem(s)


def _softmax_bwd_bytes(s):
    # Read the probabilities and their gradient, write the scores' gradient.
    return 3.0 * s["rows"] * s["cols"] * _elem(s)


def _ce_fwd_bytes(s):
    # Read the logits, write the exponentials kept for the backward (fp32).
    return 2.0 * s["tokens"] * s["vocab"] * 4


def _ce_bwd_bytes(s):
    # Read the kept softmax, write the logits' gradient (fp32).
    return 2.0 * s["tokens"] * s["vocab"] * 4


def _ssd_fwd_flops(s):
    # The chunked scan's four products (pipesim/costs/mamba.py ssd_op): per chunk C Bᵀ per group
    # (2Q²N), per head the masked product with x (2Q²P), the chunk state (2QNP), C · state (2QNP).
    q = s["chunk"]
    chunks = s["batch"] * -(-s["seq"] // q)
    return 2.0 * chunks * (s["groups"] * q * q * s["state"]
                           + s["heads"] * (q * q * s["head_dim"] + 2 * q * s["state"] * s["head_dim"]))


def _ssd_bwd_flops(s):
    return 2.0 * _ssd_fwd_flops(s)


def _conv_fwd_bytes(s):
    # The depthwise conv + SiLU: read the input, write the output.
    return 2.0 * s["tokens"] * s["channels"] * _elem(s)


def _conv_bwd_bytes(s):
    # Read the output gradient and the saved input, write the input gradient.
    return 3.0 * s["tokens"] * s["channels"] * _elem(s)


def _gdn_fwd_flops(s):
    # The delta rule token by token (the CPU emulator's form, pipesim/emulator/gated_delta.py):
    # per token and value head decay dk·dv, recall 2dk·dv, write 3dk·dv, read out 2dk·dv.
    return 8.0 * s["batch"] * s["seq"] * s["heads"] * s["key_dim"] * s["value_dim"]


def _gdn_bwd_flops(s):
    return 2.0 * _gdn_fwd_flops(s)


def _dsa_index_flops(s):
    # DSA's indexer scores (pipesim/costs/dsa.py, kernels/dsa_indexer_kernel.py): 2·heads·head_dim
    # per causal (query, key) pair, the diagonal included
    return 2.0 * s["heads"] * s["head_dim"] * s["batch"] * s["seq"] * (s["seq"] + 1) / 2


@dataclass(frozen=True)
class OpSpec:
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    work: Callable[[dict], float]
    unit: str  # "flops" or "bytes": which of tflops/gbps the work is


OPS: dict[str, OpSpec] = {
    "gemm": OpSpec(("m", "n", "k"), ("dtype",), _gemm_flops, "flops"),
    "attention_fwd": OpSpec(("batch", "heads", "seq", "head_dim"), ("causal", "dtype"),
                            _attn_fwd_flops, "flops"),
    "attention_bwd": OpSpec(("batch", "heads", "seq", "head_dim"), ("causal", "dtype"),
                            _attn_bwd_flops, "flops"),
    "layer_norm_fwd": OpSpec(("rows", "cols"), ("dtype",), _ln_fwd_bytes, "bytes"),
    "layer_norm_bwd": OpSpec(("rows", "cols"), ("dtype",), _ln_bwd_bytes, "bytes"),
    "gelu_fwd": OpSpec(("numel",), ("dtype",), _eltwise_fwd_bytes, "bytes"),
    "gelu_bwd": OpSpec(("numel",), ("dtype",), _eltwise_bwd_bytes, "bytes"),
    "mlp_fwd": OpSpec(("tokens", "hidden", "ffn"), ("dtype",), _mlp_fwd_flops, "flops"),
    "mlp_bwd": OpSpec(("tokens", "hidden", "ffn"), ("dtype",), _mlp_bwd_flops, "flops"),
    "quantize": OpSpec(("numel",), ("bits",), _quant_bytes, "bytes"),
    "dequantize": OpSpec(("numel",), ("bits",), _quant_bytes, "bytes"),
    "copy": OpSpec(("bytes",), (), _copy_bytes, "bytes"),
    # eager attention's batched matmuls (bias: a broadcast [m, n] causal mask added, baddbmm),
    # its softmax, and the LM head's cross-entropy
    "bmm": OpSpec(("batch", "m", "n", "k"), ("bias", "dtype"), _bmm_flops, "flops"),
    "softmax_fwd": OpSpec(("rows", "cols"), ("dtype",), _softmax_fwd_bytes, "bytes"),
    # a linear layer's bias: broadcast into the output (forward), summed over rows (backward)
    "bias_fwd": OpSpec(("rows", "cols"), ("dtype",), _softmax_fwd_bytes, "bytes"),
    "bias_bwd": OpSpec(("rows", "cols"), ("dtype",), _softmax_fwd_bytes, "bytes"),
    "softmax_bwd": OpSpec(("rows", "cols"), ("dtype",), _softmax_bwd_bytes, "bytes"),
    "cross_entropy_fwd": OpSpec(("tokens", "vocab"), (), _ce_fwd_bytes, "bytes"),
    "cross_entropy_bwd": OpSpec(("tokens", "vocab"), (), _ce_bwd_bytes, "bytes"),
    # one step of the CPU emulator's eager ring attention (context parallelism), fwd and bwd
    "ring_block_fwd": OpSpec(("batch", "q", "k", "head_dim"), ("causal", "dtype"), _ring_block_flops, "flops"),
    "ring_block_bwd": OpSpec(("batch", "q", "k", "head_dim"), ("causal", "dtype"), _ring_block_bwd_flops, "flops"),
    # a Mamba-2 layer's chunked scan, a Gated DeltaNet layer's delta rule and their causal depthwise
    # conv (pipesim/costs/mamba.py, gated_delta.py), as the CPU emulator runs them
    # (pipesim/emulator/mamba.py, gated_delta.py); no CUDA runner: on a GPU, the GEMM curve
    "ssd_fwd": OpSpec(("batch", "seq", "heads", "head_dim", "state", "groups", "chunk"), ("dtype",),
                      _ssd_fwd_flops, "flops"),
    "ssd_bwd": OpSpec(("batch", "seq", "heads", "head_dim", "state", "groups", "chunk"), ("dtype",),
                      _ssd_bwd_flops, "flops"),
    "gdn_fwd": OpSpec(("batch", "seq", "heads", "key_dim", "value_dim"), ("dtype",), _gdn_fwd_flops, "flops"),
    "gdn_bwd": OpSpec(("batch", "seq", "heads", "key_dim", "value_dim"), ("dtype",), _gdn_bwd_flops, "flops"),
    "conv1d_fwd": OpSpec(("tokens", "channels", "kernel"), ("dtype",), _conv_fwd_bytes, "bytes"),
    "conv1d_bwd": OpSpec(("tokens", "channels", "kernel"), ("dtype",), _conv_bwd_bytes, "bytes"),
    # DeepSeek sparse attention's indexer scores (Triton on CUDA, torch on CPU)
    "dsa_index_scores": OpSpec(("batch", "seq", "heads", "head_dim"), ("dtype",), _dsa_index_flops, "flops"),
    "sendrecv": OpSpec(("bytes",), (), _p2p_bytes, "bytes"),
    "allreduce": OpSpec(("bytes",), ("ranks",), _allreduce_bus_bytes, "bytes"),
}

# Which ops feed each achieved() kind.
_ACHIEVED_OPS = {
    "matmul": ("gemm", "mlp_fwd", "mlp_bwd"),
    # (quantize/dequantize are left out: their torch CPU path is compute-bound bit fiddling, and
    # they have their own lookups.)
    "memory": ("copy", "layer_norm_fwd", "layer_norm_bwd", "gelu_fwd", "gelu_bwd"),
    "p2p": ("sendrecv",),
    "allreduce": ("allreduce",),
}


def normalize_shape(op: str, shape: dict) -> dict:
    """Canonical shape dict: dtype aliases folded ("bfloat16" -> "bf16"), causal as bool,
    integral numbers as int. Raises ValueError when a known op misses a keyword."""
    out = {}
    for key, value in shape.items():
        if key == "dtype":
            value = str(value).lower()
            value = _DTYPE_ALIASES.get(value, value)
        elif key in ("causal", "bias"):
            value = bool(value)
        elif isinstance(value, float) and value.is_integer():
            value = int(value)
        out[key] = value
    spec = OPS.get(op)
    if spec is not None:
        missing = [k for k in spec.numeric + spec.categorical if k not in out]
        if missing:
            raise ValueError(f"op {op!r} needs shape keys {', '.join(missing)} (got {sorted(out)})")
    return out


def work_of(op: str, shape: dict) -> float | None:
    """FLOPs (compute ops) or bytes moved (memory/comm ops) of one call; None for unknown ops."""
    spec = OPS.get(op)
    return None if spec is None else float(spec.work(shape))


def throughput_fields(op: str, shape: dict, seconds: float) -> tuple[float | None, float | None]:
    """(tflops, gbps) achieved by one call of `seconds`, as stored in a measurement."""
    spec = OPS.get(op)
    if spec is None or seconds <= 0:
        return None, None
    w = spec.work(shape) / seconds
    return (w / 1e12, None) if spec.unit == "flops" else (None, w / 1e9)


IN_MODEL = "torch in-model"     # Measurement.impl of ops timed inside the emulator's model


@dataclass
class Measurement:
    op: str
    shape: dict
    median_s: float
    p10_s: float
    p90_s: float
    n: int
    tflops: float | None = None
    gbps: float | None = None
    impl: str | None = None   # what ran: "triton" (pipesim.kernels) or "torch"; informational
    isolated_s: float | None = None   # impl IN_MODEL: the same key timed alone (median)
    mean_s: float | None = None       # impl IN_MODEL: the mean of the in-model timings

    @property
    def cost_s(self) -> float:
        """The seconds a cost lookup returns: the mean where the profile has it. An action costs
        the sum of its calls, and the expected sum is the sum of the calls' means; in-model
        timings are skewed to the right (shape A's stage 0: the count-weighted means 3 % above
        the medians, layer norm's 37 %), so medians would bias every action short."""
        return self.mean_s if self.mean_s is not None else self.median_s

    def to_dict(self) -> dict:
        d = {"op": self.op, "shape": dict(self.shape), "median_s": self.median_s,
             "p10_s": self.p10_s, "p90_s": self.p90_s, "n": self.n,
             "tflops": self.tflops, "gbps": self.gbps}
        if self.impl:
            d["impl"] = self.impl
        if self.isolated_s is not None:
            d["isolated_s"] = self.isolated_s
        if self.mean_s is not None:
            d["mean_s"] = self.mean_s
        return d


def _cat_key(spec: OpSpec | None, shape: dict) -> tuple:
    if spec is None:
        return ()
    return tuple((k, shape.get(k)) for k in spec.categorical)


@dataclass
class CostProfile:
    """A device's measured op costs. See the module docstring for the file format."""

    device: dict
    measurements: list[Measurement] = field(default_factory=list)
    created: str = ""
    source: str = "<memory>"  # the file it came from, for error messages

    def __post_init__(self):
        # (op, categorical key) -> sorted list of (work, seconds, shape); exact shapes -> seconds.
        self._exact: dict[tuple, float] = {}
        self._curves: dict[tuple, list[tuple[float, float]]] = {}
        for m in self.measurements:
            self._exact[(m.op, _freeze(m.shape))] = m.cost_s
            spec = OPS.get(m.op)
            if spec is None:
                continue
            self._curves.setdefault((m.op, _cat_key(spec, m.shape)), []).append(
                (spec.work(m.shape), m.cost_s))
        for key, pts in self._curves.items():
            self._curves[key] = _merge_equal_work(sorted(pts))

    # -- queries ----------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return str(self.device.get("kind", ""))

    def ops(self) -> set[str]:
        return {m.op for m in self.measurements}

    def lookup(self, op: str, **shape) -> tuple[float, str] | None:
        """Seconds for one call and the source, "measured" or "interpolated"; None when the op
        (or its categorical keys) was never measured. See the module docstring."""
        spec = OPS.get(op)
        shape = normalize_shape(op, shape)
        exact = self._exact.get((op, _freeze(shape)))
        if exact is not None:
            return exact, "measured"
        if spec is None:
            return None
        pts = self._curves.get((op, _cat_key(spec, shape)))
        if not pts:
            return None
        w = spec.work(shape)
        if w <= 0:
            return 0.0, "interpolated"
        return _interpolate(pts, w), "interpolated"

    def achieved(self, kind: str, dtype: str | None = None) -> float | None:
        """Fitted achieved throughput: "matmul" -> FLOP/s (gemm/mlp points), "memory" -> bytes/s
        (copy and memory-bound ops), "p2p" -> bytes/s, "allreduce" -> bus bytes/s
        (2(n-1)/n · size / time). None when the profile has no such points.

        The fit is total work ÷ total time over the larger half of the points (by work): the
        asymptotic throughput the roofline fallback needs, not dominated by launch overhead of
        tiny shapes. Ops timed inside a model (impl "torch in-model", pipesim/calibrate/in_context.py)
        enter with their isolated time: the in-model time holds the model's cache state and
        strided layouts, not the streaming rate the fallback (an optimizer step, residual adds)
        runs at."""
        if kind not in _ACHIEVED_OPS:
            raise ValueError(f"achieved(): kind must be one of {sorted(_ACHIEVED_OPS)}, got {kind!r}")
        if dtype is not None:
            dtype = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
        pts = []
        for m in self.measurements:
            sec = m.isolated_s if m.impl == IN_MODEL else m.median_s
            if m.op not in _ACHIEVED_OPS[kind] or not sec or sec <= 0:
                continue
            if dtype is not None and "dtype" in m.shape and m.shape["dtype"] != dtype:
                continue
            pts.append((OPS[m.op].work(m.shape), sec))
        if not pts:
            return None
        pts.sort()
        top = pts[len(pts) // 2:]
        return sum(w for w, _ in top) / sum(t for _, t in top)

    def require_device(self, kind: str) -> None:
        """Raise ProfileError unless the profile was measured on a device of this kind."""
        if self.kind != kind:
            raise ProfileError(
                f"{self.source}: device.kind is {self.kind!r} but this run needs {kind!r}; "
                f"calibrate on this device (pipesim calibrate --device {kind}) or use the "
                "analytic roofline (costs.profile: null)")

    def mismatch(self, gpu_name: str) -> str | None:
        """None when this profile plausibly describes a device called `gpu_name` (a scenario's
        system.gpu.name), else a one-line reason, for the caller to raise or to state as a
        fallback. CPU profiles go with CPU systems (names containing "cpu"); CUDA profiles with
        the others, and when both names carry a model number (H100, A100, ...) it must agree."""
        import re
        gpu = str(gpu_name).lower()
        prof = str(self.device.get("name", "")).lower()
        system_is_cpu = "cpu" in gpu
        if (self.kind == "cpu") != system_is_cpu:
            return (f"{self.source}: measured on {self.kind} ({self.device.get('name')}) but the "
                    f"scenario's system.gpu is {gpu_name!r}")
        models = lambda text: set(re.findall(r"\b[a-z]{1,2}\d{2,4}\b", text))
        a, b = models(prof), models(gpu)
        if self.kind == "cuda" and a and b and not (a & b):
            return (f"{self.source}: measured on {self.device.get('name')!r} but the scenario's "
                    f"system.gpu is {gpu_name!r}")
        return None

    # -- serialisation ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"version": PROFILE_VERSION, "device": dict(self.device), "created": self.created,
                "measurements": [m.to_dict() for m in self.measurements]}

    def save(self, path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")


def _freeze(shape: dict) -> tuple:
    return tuple(sorted(shape.items()))


def _merge_equal_work(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points of equal work (e.g. gemm shapes with the same m·n·k) merge to their geometric mean
    time, so the curve is a function of work."""
    merged: list[tuple[float, list[float]]] = []
    for w, t in pts:
        if merged and merged[-1][0] == w:
            merged[-1][1].append(t)
        else:
            merged.append((w, [t]))
    return [(w, math.exp(sum(math.log(max(t, 1e-30)) for t in ts) / len(ts))) for w, ts in merged]


def _interpolate(pts: list[tuple[float, float]], w: float) -> float:
    works = [p[0] for p in pts]
    i = bisect.bisect_left(works, w)
    if i < len(pts) and works[i] == w:
        return pts[i][1]
    if i == 0 or i == len(pts):
        # Outside the measured range: the nearest point's achieved throughput, time ∝ work.
        w0, t0 = pts[0] if i == 0 else pts[-1]
        return t0 * w / w0 if w0 > 0 else t0
    (w0, t0), (w1, t1) = pts[i - 1], pts[i]
    if w0 <= 0 or t0 <= 0 or t1 <= 0:
        return t0 + (t1 - t0) * (w - w0) / (w1 - w0)
    # Straight line in log(time) vs log(work) between the two neighbours.
    frac = (math.log(w) - math.log(w0)) / (math.log(w1) - math.log(w0))
    return math.exp(math.log(t0) + frac * (math.log(t1) - math.log(t0)))


# --- loading --------------------------------------------------------------------------------------

def _num(value, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProfileError(f"{where}: expected a number, got {value!r}")
    if positive and value < 0:
        raise ProfileError(f"{where}: expected a number >= 0, got {value!r}")
    return float(value)


def profile_from_dict(data, source: str = "<dict>") -> CostProfile:
    """Validate a parsed profile and build a CostProfile; ProfileError names file and key."""
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a JSON object at the top level, got {type(data).__name__}")
    for key in ("version", "device", "measurements"):
        if key not in data:
            raise ProfileError(f"{source}: missing key '{key}'")
    if data["version"] != PROFILE_VERSION:
        raise ProfileError(f"{source}: version is {data['version']!r}, this pipesim reads version "
                           f"{PROFILE_VERSION}; re-run pipesim calibrate")
    device = data["device"]
    if not isinstance(device, dict):
        raise ProfileError(f"{source}: 'device' must be an object")
    for key in ("name", "kind"):
        if key not in device:
            raise ProfileError(f"{source}: missing key 'device.{key}'")
    if device["kind"] not in ("cuda", "cpu"):
        raise ProfileError(f"{source}: device.kind must be 'cuda' or 'cpu', got {device['kind']!r}")
    if not isinstance(data["measurements"], list):
        raise ProfileError(f"{source}: 'measurements' must be a list")
    out = []
    for i, m in enumerate(data["measurements"]):
        where = f"{source}: measurements[{i}]"
        if not isinstance(m, dict):
            raise ProfileError(f"{where}: expected an object")
        for key in ("op", "shape", "median_s"):
            if key not in m:
                raise ProfileError(f"{where}: missing key '{key}'")
        op, shape = m["op"], m["shape"]
        if not isinstance(op, str) or not isinstance(shape, dict):
            raise ProfileError(f"{where}: 'op' must be a string and 'shape' an object")
        try:
            shape = normalize_shape(op, shape)
        except ValueError as exc:
            raise ProfileError(f"{where}.shape: {exc}") from None
        spec = OPS.get(op)
        if spec is not None:
            for k in spec.numeric:
                _num(shape[k], f"{where}.shape.{k}", positive=True)
        median = _num(m["median_s"], f"{where}.median_s", positive=True)
        p10 = _num(m.get("p10_s", median), f"{where}.p10_s", positive=True)
        p90 = _num(m.get("p90_s", median), f"{where}.p90_s", positive=True)
        n = int(_num(m.get("n", 1), f"{where}.n", positive=True))
        tflops, gbps = m.get("tflops"), m.get("gbps")
        out.append(Measurement(op, shape, median, p10, p90, n,
                               None if tflops is None else _num(tflops, f"{where}.tflops"),
                               None if gbps is None else _num(gbps, f"{where}.gbps"),
                               str(m["impl"]) if m.get("impl") else None,
                               None if m.get("isolated_s") is None
                               else _num(m["isolated_s"], f"{where}.isolated_s", positive=True),
                               None if m.get("mean_s") is None
                               else _num(m["mean_s"], f"{where}.mean_s", positive=True)))
    return CostProfile(device=dict(device), measurements=out, created=str(data.get("created", "")),
                       source=source)


def load_profile(path) -> CostProfile:
    """Read and validate a profile file. Raises ProfileError for a missing file, bad JSON, a
    wrong version or missing keys, naming the file and the key."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ProfileError(f"{path}: cost profile not found (create one with pipesim calibrate)") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read cost profile: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    return profile_from_dict(data, source=str(path))
