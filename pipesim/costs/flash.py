"""Fused (flash) attention time from published kernel tables, by sequence length.

FLOPs follow the FlashAttention papers' convention (Dao 2023, FlashAttention-2, Sec. 4.1):
forward 4·b·heads·s²·d (half when causal), backward 2.5x the forward. The achieved TFLOP/s at a
sequence length is interpolated (log-linear in s, clamped at the table ends) in the GPU's table
(pipesim/presets/attention_tables.py: NVIDIA's cudnn-frontend benchmarks of cuDNN on Hopper and
Blackwell, several releases each, and the cuDNN / FlashAttention-2 / -3 bars of the FlashAttention-3
paper, Fig. 5, on Hopper; head dim 128), times a head-dim factor from the measured panels at other
head dims (head_dim_factor).
A table with a measured causal backward (`bwd_causal`: the Blackwell cuDNN tables) uses it; the
others' backward is non-causal only, and a causal backward keeps the forward's causal/non-causal
ratio at that length (the same masked blocks are skipped).
"""
from __future__ import annotations

import calendar
import math
import re
from datetime import date

from pipesim.presets.attention_tables import CUDNN_MEASURED
from pipesim.presets.attention_tables import interp_by_seq as _interp
from pipesim.presets.gpus import KERNEL_CURVES


def attention_tflops(curve: dict, seq: float, causal: bool, phase: str, kernel: str = "auto",
                     head_dim: float = 128, dtype: str = "bf16", window_seq: float = 0.0) -> float:
    """Achieved TFLOP/s of the fused attention kernel on this GPU (`kernel`: a name of the curve's
    `attention_kernels`, or "auto" for its default table) at `head_dim`; `dtype` "fp8" / "mxfp8":
    cuDNN's FP8 attention with per-tensor / MXFP8 scaling, as its speed-up over BF16 measured in
    the same run (fp8_table over its `bf16_ref`; MLA's panels of both for an MLA op) applied to
    the BF16 rate, so that FP8 and BF16 attention are compared at one
    software version. `window_seq`: a sliding-window band of `seq` keys over that many tokens, at
    the GPU's measured window kernels where it has them (window_tflops)."""
    if window_seq:
        measured = window_tflops(curve, seq, head_dim, window_seq, phase, kernel, dtype)
        if measured is not None:
            return measured
    table, scale = attention_table(curve, kernel)
    base = table.get("relative_to", table)
    rate = scale * _table_rate(base, seq, causal, phase) * head_dim_factor(
        base, ("fwd" if phase == "fwd" else "bwd") + ("_causal" if causal else ""), seq, head_dim)
    if base is not table:
        rate *= relative_rate(table, seq, causal, head_dim)
    if dtype != "bf16":
        fp8 = fp8_table(curve, table, dtype)
        ref = fp8["bf16_ref"]
        if isinstance(head_dim, tuple) and "mla" in fp8 and "mla" in ref:     # MLA's own FP8 speed-up
            fp8, ref = fp8["mla"], ref["mla"]
        rate *= _table_rate(fp8, seq, causal, phase) / _table_rate(ref, seq, causal, phase)
    return rate


def window_tflops(curve: dict, window: int, head_dim: float, seq: float, phase: str, kernel: str = "auto",
                  dtype: str = "bf16") -> float | None:
    """Measured TFLOP/s (counted on the band) of cuDNN's causal sliding-window attention over `seq`
    tokens, where the GPU has a measurement at this window and head dim (`attention_window`:
    presets/gpus.py), scaled as the GPU's attention table; None elsewhere (other windows, head dims,
    kernels than the default cuDNN): the full table's rate at the window length then applies."""
    table = curve.get("attention_window")
    if (table is None or kernel not in ("auto", "cudnn") or dtype not in table
            or (window, head_dim) != (table["window"], table["head_dim"])):
        return None
    return curve["attention_scale"] * _interp(table[dtype]["fwd" if phase == "fwd" else "bwd"], seq)


def relative_rate(table: dict, seq: float, causal: bool, head_dim) -> float:
    """A kernel timed on another's table (`relative_to`): its rate over that table's at `seq`
    (interp_by_seq of the panel at this causality), log-linear in the head dim between the
    measured panels and held beyond them (an MLA shape at its value head dim). The panels are the
    kernel's measured ratio to the other (`ratio`), or its own forward + backward bars (`fwd_bwd`)
    over the other table's forward + backward rate at each bar."""
    ratio = table.get("ratio") or _bar_ratios(table)
    d = float(head_dim[1] if isinstance(head_dim, tuple) else head_dim)
    dims = sorted(hd for c, hd in ratio if c == causal)
    lo = max((x for x in dims if x <= d), default=dims[0])
    hi = min((x for x in dims if x >= d), default=dims[-1])
    r_lo, r_hi = (_interp(ratio[(causal, x)], seq) for x in (lo, hi))
    if lo == hi:
        return r_lo
    return r_lo + (math.log(d / lo) / math.log(hi / lo)) * (r_hi - r_lo)


_BAR_RATIOS: dict[int, dict] = {}


def _bar_ratios(table: dict) -> dict:
    """{(causal, head dim): ((seq, bar / the base table's forward + backward rate), ...)} of a
    table given as forward + backward bars (the FlashAttention papers' count: backward 2.5x the
    forward's FLOPs), computed once per table."""
    if id(table) not in _BAR_RATIOS:
        base = table["relative_to"]

        def fwd_bwd(seq, causal, hd):
            suffix = "_causal" if causal else ""
            f, b = (_table_rate(base, seq, causal, phase) * head_dim_factor(base, phase + suffix, seq, hd)
                    for phase in ("fwd", "bwd"))
            return 3.5 / (1 / f + 2.5 / b)
        _BAR_RATIOS[id(table)] = {(causal, hd): tuple((s, bar / fwd_bwd(s, causal, hd)) for s, bar in bars)
                                  for (causal, hd), bars in table["fwd_bwd"].items()}
    return _BAR_RATIOS[id(table)]


def _table_rate(table: dict, seq: float, causal: bool, phase: str) -> float:
    """A table's head-dim-128 rate: the causal backward measured where it was, else the non-causal
    backward times the forward's causal / non-causal ratio."""
    if phase == "fwd":
        return _interp(table["fwd_causal" if causal else "fwd"], seq)
    if causal and "bwd_causal" in table:
        return _interp(table["bwd_causal"], seq)
    bwd = _interp(table["bwd"], seq)
    return bwd * _interp(table["fwd_causal"], seq) / _interp(table["fwd"], seq) if causal else bwd


def fp8_table(curve: dict, table: dict, dtype: str) -> dict:
    """The FP8 attention table (with its `bf16_ref`) a kernel table is read against under FP8
    attention: the kernel's own per-tensor FP8 run where it has one (the dated cuDNN tables),
    else the GPU's."""
    own = table.get("fp8")
    return own if dtype == "fp8" and own is not None else curve["attention_fp8"][dtype]


def attention_table(curve: dict, kernel: str = "auto") -> tuple[dict, float]:
    """(table, scale) of the fused-attention kernel `kernel` ("auto": the curve's default)."""
    if kernel == "auto":
        return curve["attention"], curve["attention_scale"]
    return curve["attention_kernels"][kernel]


def attention_source(curve: dict, kernel: str = "auto", dtype: str = "bf16") -> str:
    """Where the attention rates come from, for the report: the table's measurement, for a GPU
    that borrows another's table the scale applied, and under FP8 the run its speed-up is from."""
    table, scale = attention_table(curve, kernel)
    label = table.get("source", "published kernel table")
    if scale != 1.0:
        label += f", x {scale:.3f} (this GPU's matmul rate over the table GPU's)"
    if dtype != "bf16":
        label += f"; FP8 at the FP8 / BF16 ratio of {fp8_table(curve, table, dtype).get('source', 'a published run')}"
    return label


def head_dim_factor(table: dict, key: str, seq: float, head_dim) -> float:
    """Rate at `head_dim` over the rate at 128 (the main table): log-linear in the head dim between
    the nearest measured dims, held beyond. The dims are the table's own head-dim panels (Hopper:
    the FlashAttention-3 paper's 64 and 256 panels, Fig. 5 / 6; Blackwell: Qwen3.5's 256 in NVIDIA's
    runs) and, for dims it has none of, those of the table it names in `head_dim_from`. MLA
    attention (`head_dim` ("mla", d), q/k and v of different widths) reads NVIDIA's DeepSeek-V3 runs
    (the table's or a borrowed `mla` panel), its own shape, where one exists, else the dims at d. A
    panel without the phase asked for gives the nearest it has (_PANEL_FALLBACK: a causal backward
    the non-causal backward's factor - the FA3 paper's head-dim-64 backward panel is non-causal -,
    then the forward's: it has no backward panel at 256); each factor is taken against its own
    table at a length inside the panel's range."""
    if isinstance(head_dim, tuple):
        mla = next((_factor(t, t["mla"], key, seq) for t in _chain(table) if "mla" in t), None)
        if mla is not None:
            return mla
        head_dim = head_dim[1]
    if head_dim == 128:
        return 1.0
    factors = {128: 1.0}
    for t in _chain(table):
        for d, panel in t.get("head_dim", {}).items():
            if d not in factors:
                f = _factor(t, panel, key, seq)
                if f is not None:
                    factors[d] = f
    dims = sorted(factors)
    if head_dim <= dims[0] or head_dim >= dims[-1]:
        return factors[dims[0] if head_dim <= dims[0] else dims[-1]]
    lo = max(d for d in dims if d <= head_dim)
    hi = min(d for d in dims if d > head_dim)
    w = (math.log(head_dim) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return factors[lo] + w * (factors[hi] - factors[lo])


# The phase a head-dim panel without the asked one is read at, nearest first.
_PANEL_FALLBACK = {"fwd": ("fwd", "fwd_causal"), "fwd_causal": ("fwd_causal", "fwd"),
                   "bwd": ("bwd", "bwd_causal", "fwd", "fwd_causal"),
                   "bwd_causal": ("bwd_causal", "bwd", "fwd", "fwd_causal")}


def _chain(table: dict | None):
    """The table and those it borrows head-dim panels from (tables may borrow from each other)."""
    seen: set = set()
    while table is not None and id(table) not in seen:
        seen.add(id(table))
        yield table
        table = table.get("head_dim_from")


def _factor(table: dict, panel: dict, key: str, seq: float) -> float | None:
    """A panel's rate over its own table's, at the phase nearest `key` it has and a length inside
    its range; None for a panel without any phase."""
    k = next((k for k in _PANEL_FALLBACK[key] if k in panel), None)
    if k is None:
        return None
    lengths = [s for s, _ in panel[k]]
    at = min(max(seq, min(lengths)), max(lengths))
    return _interp(panel[k], at) / _interp(table[k], at)


def parse_software_date(text: str | None) -> date | None:
    """`training.software_date` as the last day it can mean ("2025-11" -> 2025-11-30); None when
    unset. A malformed value raises ValueError (the scenario checks name the key)."""
    if text is None:
        return None
    bad = ValueError(f"expected a date YYYY-MM or YYYY-MM-DD, got {text!r}")
    m = re.fullmatch(r"(\d{4})-(\d{2})(?:-(\d{2}))?", str(text).strip())
    if m is None or not 1 <= int(m.group(2)) <= 12:
        raise bad
    year, month = int(m.group(1)), int(m.group(2))
    try:
        return date(year, month, int(m.group(3)) if m.group(3) else calendar.monthrange(year, month)[1])
    except ValueError:                      # a day the month does not have
        raise bad from None


def dated_cudnn(curve: str | None, when: date | None) -> str | None:
    """The `attention_kernel` of Transformer Engine's cuDNN as software dated `when` ran it on a
    GPU of kernel curve `curve`: the newest cuDNN table measured by then (presets/attention_tables.py
    CUDNN_MEASURED), the oldest for software older than every measurement; None without a date or
    dated tables for the GPU (the curve's default, the newest)."""
    dated = next((tables for curves, tables in CUDNN_MEASURED if curve in curves), None)
    if when is None or dated is None:
        return None
    return max(((d, k) for d, k in dated if d <= when), default=dated[0])[1]


def attention_kernel_of(s) -> str:
    """`training.attention_kernel: auto` is what the stack runs: Transformer Engine's choice
    (the curve's default table: cuDNN on Hopper and Blackwell) for the fused Megatron stack, and
    PyTorch SDPA's for a PyTorch-native one (kernel_fusion: eager, torchtitan-style): SDPA tries
    its backends in a fixed order with FlashAttention first (torch.nn.attention.SDPBackend;
    cuDNN only when asked for), i.e. the FlashAttention-2 table where the GPU has one. That is
    the order of the published torch-stack runs (torch <= 2.10); from 2.11 the wheels' bundled
    cuDNN passes the version gate of aten's check_prefer_cudnn_attention (cuDNN > 9.15, sm90 /
    sm100) and SDPA prefers cuDNN there: such a run sets `attention_kernel: sdpa-cudnn`. Under
    Transformer Engine the cuDNN release is the newest measured, or the one of
    `training.software_date` (dated_cudnn)."""
    tr = s.training
    curve = s.system.gpu.kernel_curve
    if tr.attention_kernel != "auto" or curve is None:
        return tr.attention_kernel
    if tr.kernel_fusion != "eager":         # Transformer Engine's cuDNN, as the stack's date had it
        return dated_cudnn(curve, parse_software_date(tr.software_date)) or "auto"
    return "fa2" if "fa2" in KERNEL_CURVES.get(curve, {}).get("attention_kernels", {}) else "auto"
