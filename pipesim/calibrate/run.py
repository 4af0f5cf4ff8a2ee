"""`pipesim calibrate`: measure op costs on this device and write a cost profile
(format: pipesim.costs.profile).

What is measured: the (op, shape) pairs a scenario needs (pipesim.costs.required_measurements)
or, without a scenario, a default grid covering every op key of the profile, plus device memory
bandwidth (copy) and send/recv and all-reduce bandwidth between two local processes.

Timing: on CUDA, the Triton kernels of pipesim.kernels under triton.testing.do_bench (L2 flushed
before every call); on CPU, the same ops in torch with torch.set_num_threads(threads) (one thread
by default, as the CPU emulator gives each rank one thread), repeated until a time budget per op,
in thread CPU time (time_cpu).
"""
from __future__ import annotations

import datetime
import platform
import time
from typing import Callable

from pipesim.costs.profile import (OPS, CostProfile, Measurement, normalize_shape,
                                   throughput_fields)
from pipesim.calibrate.comm import measure_comm, summarize
from pipesim.errors import ProfileError

Progress = Callable[[int, int, str], None]

QUANT_BITS = (16, 12, 8, 4, "fp8")
# Per-op time budget for the CPU timer: (quick, full) seconds.
CPU_BUDGET_S = (0.05, 0.25)
# Longest single call we are willing to time on CPU: (quick, full) seconds. Larger shapes (a
# GPT-3 layer's GEMMs take seconds on one core) are measured at a reduced size with the same
# categorical keys, and lookups extrapolate at the achieved throughput.
CPU_MAX_CALL_S = (0.05, 0.3)
# Starting guesses of one CPU core's throughput, replaced by the rates measured as we go.
CPU_GUESS_FLOPS = 5e10
CPU_GUESS_BYTES = 5e9
# Which dimension to halve when shrinking a shape, in order of preference.
_SHRINK_KEYS = {
    "attention_fwd": ("batch", "heads", "seq"), "attention_bwd": ("batch", "heads", "seq"),
    "layer_norm_fwd": ("rows",), "layer_norm_bwd": ("rows",), "gelu_fwd": ("numel",),
    "gelu_bwd": ("numel",), "mlp_fwd": ("tokens",), "mlp_bwd": ("tokens",),
    "quantize": ("numel",), "dequantize": ("numel",), "copy": ("bytes",),
    "bmm": ("batch",), "softmax_fwd": ("rows",), "softmax_bwd": ("rows",), "bias_fwd": ("rows",),
    "bias_bwd": ("rows",),
    "cross_entropy_fwd": ("tokens",), "cross_entropy_bwd": ("tokens",),
    "ring_block_fwd": ("batch",), "ring_block_bwd": ("batch",),
    "ssd_fwd": ("batch", "heads"), "ssd_bwd": ("batch", "heads"), "conv1d_fwd": ("tokens",),
    "conv1d_bwd": ("tokens",), "gdn_fwd": ("batch", "heads"), "gdn_bwd": ("batch", "heads"),
    "dsa_index_scores": ("batch", "heads", "seq"),
}


# --- what to measure ------------------------------------------------------------------------------

def default_grid(device: str, quick: bool = False) -> list[tuple[str, dict]]:
    """Shapes spanning small to large per op, so lookups interpolate rather than extrapolate.
    CPU shapes are small enough for a one-thread torch run in well under a minute."""
    gpu = device == "cuda"
    dt = "bf16" if gpu else "fp32"
    pick = (lambda xs: xs[::2] if quick else xs)
    grid: list[tuple[str, dict]] = []
    gemm = [512, 1024, 2048, 4096, 8192] if gpu else [64, 128, 256, 512]
    for n in pick(gemm):
        grid.append(("gemm", dict(m=n, n=n, k=n, dtype=dt)))
    seqs = [512, 1024, 2048, 4096, 8192] if gpu else [64, 128, 256]
    heads = 16 if gpu else 2
    for seq in pick(seqs):
        for causal in (False, True):
            shape = dict(batch=1, heads=heads, seq=seq, head_dim=128 if gpu else 64,
                         causal=causal, dtype=dt)
            grid += [("attention_fwd", shape), ("attention_bwd", dict(shape))]
    rows = [4096, 8192, 16384] if gpu else [64, 256, 1024]
    for r in pick(rows):
        shape = dict(rows=r, cols=4096 if gpu else 512, dtype=dt)
        grid += [("layer_norm_fwd", shape), ("layer_norm_bwd", dict(shape))]
    numels = [1 << 20, 1 << 24, 1 << 27] if gpu else [1 << 14, 1 << 17, 1 << 20]
    for n in pick(numels):
        grid += [("gelu_fwd", dict(numel=n, dtype=dt)), ("gelu_bwd", dict(numel=n, dtype=dt))]
    mlps = ([(4096, 4096), (4096, 12288), (8192, 12288)] if gpu
            else [(64, 128), (128, 256), (256, 512)])
    for tokens, hidden in pick(mlps):
        shape = dict(tokens=tokens, hidden=hidden, ffn=4 * hidden, dtype=dt)
        grid += [("mlp_fwd", shape), ("mlp_bwd", dict(shape))]
    qn = [1 << 20, 1 << 24] if gpu else [1 << 14, 1 << 18]
    for n in pick(qn):
        for bits in QUANT_BITS:
            grid += [("quantize", dict(numel=n, bits=bits)), ("dequantize", dict(numel=n, bits=bits))]
    for seq in pick(seqs):      # eager attention: batched GEMMs and softmax over (batch x heads)
        bh = 16 if gpu else 4
        grid += [("bmm", dict(batch=bh, m=seq, n=seq, k=64, bias=True, dtype=dt)),
                 ("bmm", dict(batch=bh, m=seq, n=64, k=seq, bias=False, dtype=dt)),
                 ("softmax_fwd", dict(rows=bh * seq, cols=seq, dtype=dt)),
                 ("softmax_bwd", dict(rows=bh * seq, cols=seq, dtype=dt))]
        # one step of the emulator's eager ring attention (context parallelism), causal mask
        ring = dict(batch=bh, q=seq, k=seq, head_dim=64, causal=True, dtype=dt)
        grid += [("ring_block_fwd", ring), ("ring_block_bwd", dict(ring))]
    for r in pick(rows):
        grid += [("bias_fwd", dict(rows=r, cols=4096 if gpu else 512, dtype=dt)),
                 ("bias_bwd", dict(rows=r, cols=4096 if gpu else 512, dtype=dt))]
    for tokens in pick(rows):
        grid += [("cross_entropy_fwd", dict(tokens=tokens, vocab=32768 if gpu else 2048)),
                 ("cross_entropy_bwd", dict(tokens=tokens, vocab=32768 if gpu else 2048))]
    if not gpu:     # the emulator's Mamba scan, delta rule and conv (CPU runners only: on a GPU, the GEMM curve)
        for seq in pick(seqs):
            ssd = dict(batch=1, seq=seq, heads=4, head_dim=16, state=16, groups=2, chunk=32, dtype=dt)
            conv = dict(tokens=seq, channels=128, kernel=4, dtype=dt)
            gdn = dict(batch=1, seq=seq, heads=4, key_dim=16, value_dim=16, dtype=dt)
            grid += [("ssd_fwd", ssd), ("ssd_bwd", dict(ssd)), ("conv1d_fwd", conv), ("conv1d_bwd", dict(conv)),
                     ("gdn_fwd", gdn), ("gdn_bwd", dict(gdn))]
    for seq in pick(seqs):      # DSA's lightning-indexer scores (DeepSeek-V3.2: 64 heads of 128)
        grid.append(("dsa_index_scores", dict(batch=1, seq=seq, heads=64 if gpu else 4,
                                              head_dim=128 if gpu else 16, dtype=dt)))
    copies = [1 << 20, 1 << 24, 1 << 28, 1 << 30] if gpu else [1 << 16, 1 << 20, 1 << 24]
    for n in pick(copies):
        grid.append(("copy", dict(bytes=n)))
    return grid


def comm_sizes(device: str, quick: bool = False) -> list[int]:
    sizes = ([1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 28] if device == "cuda"
             else [1 << 12, 1 << 16, 1 << 20, 1 << 23])
    return sizes[::2] if quick else sizes


def scenario_plan(scenario) -> tuple[list[tuple[str, dict]], str | None]:
    """The scenario's required measurements, or (default-grid hook) None and a note when the cost
    model does not provide pipesim.costs.required_measurements."""
    try:
        from pipesim.costs import required_measurements
    except ImportError:
        # HOOK: pipesim.costs.required_measurements(scenario) -> [(op, shape)] is written by the
        # cost-model owner; until it exists a scenario calibrates the default grid.
        return [], "pipesim.costs.required_measurements is unavailable; measured the default grid"
    return [(op, dict(shape)) for op, shape in required_measurements(scenario)], None


def plan(device: str, scenario=None, quick: bool = False,
         grid: bool = False) -> tuple[list[tuple[str, dict]], list[str]]:
    """(ops to time, notes): the scenario's shapes (plus the default grid when `grid`), or the
    default grid. Always includes the device's memory bandwidth (copy)."""
    notes: list[str] = []
    items: list[tuple[str, dict]] = []
    if scenario is not None:
        items, note = scenario_plan(scenario)
        if note:
            notes.append(note)
    if not items:
        items = default_grid(device, quick)
    elif grid:
        items = items + default_grid(device, quick)
    else:
        # A scenario's list plus the device memory bandwidth (the roofline fallback needs it).
        items = items + [it for it in default_grid(device, quick=True) if it[0] == "copy"]
    seen, out = set(), []
    for op, shape in items:
        if op not in OPS or op in ("sendrecv", "allreduce"):
            continue  # comm is measured separately, unknown ops are skipped
        shape = normalize_shape(op, shape)
        key = (op, tuple(sorted(shape.items())))
        if key not in seen:
            seen.add(key)
            out.append((op, shape))
    return out, notes


# --- device description ---------------------------------------------------------------------------

def device_info(device: str, threads: int) -> dict:
    import torch
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    info = {"kind": device, "torch": torch.__version__, "triton": triton_version,
            "python": platform.python_version(), "date": now, "threads": threads}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, driver=_cuda_driver(), cuda=torch.version.cuda,
                    capability=f"{props.major}.{props.minor}", memory_bytes=props.total_memory,
                    sm_count=props.multi_processor_count)
    else:
        info.update(name=_cpu_name(), driver=None,
                    machine=platform.machine(), system=platform.system())
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cuda_driver():
    try:
        import subprocess
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


# --- timing -----------------------------------------------------------------------------------------

def shrink(op: str, shape: dict, seconds_per_work: float, max_call_s: float) -> dict:
    """The shape itself if one call should take <= max_call_s, else a copy with its leading
    dimension halved until it does (gemm: its largest dimension)."""
    spec = OPS[op]
    shape = dict(shape)
    while spec.work(shape) * seconds_per_work > max_call_s:
        if op == "gemm":
            key = max(("m", "n", "k"), key=lambda k: shape[k])
        else:
            key = next((k for k in _SHRINK_KEYS.get(op, ()) if shape[k] > 1), None)
        if key is None or shape[key] <= 16:
            break
        shape[key] = shape[key] // 2
    return shape


def _cpu_seconds_per_work(op, shape, cache, max_call_s, make_runner) -> float:
    """Seconds per unit of work for this op and its categorical keys, from one timed call of a
    shape small enough at the guessed rate (fp16 GEMMs on a CPU core run ~50x slower than fp32,
    so a guess alone cannot size the real measurement)."""
    spec = OPS[op]
    key = (op, tuple((k, shape.get(k)) for k in spec.categorical))
    if key not in cache:
        guess = 1.0 / (CPU_GUESS_FLOPS if spec.unit == "flops" else CPU_GUESS_BYTES)
        probe = shrink(op, shape, guess, max_call_s / 20)
        try:
            fn, _ = make_runner(op, probe, "cpu")
            times = time_cpu(fn, 0.0, min_n=1, max_n=1)
            cache[key] = max(times[0], 1e-7) / max(spec.work(probe), 1.0)
        except Exception:  # noqa: BLE001 - the real measurement reports the failure
            cache[key] = guess
    return cache[key]


# Inside a model every op reads operands that the ops just before it produced or that its stage
# touches every micro-batch: pushed out of the core's private caches, mostly still in the shared
# last-level cache. So before every timed CPU call, write 4x the private L2 (L1 and L2 then hold
# none of the operands, L3 does), as triton's do_bench flushes L2 on CUDA. Flushing the L3 too
# (every operand from DRAM) overestimated a 6-layer h=192 GPT by 35 % (forward) and 44 %
# (backward) on the build machine at load 6; mixing L3-warm and DRAM-cold timings by the rank's
# working set (1 - L3 share / working set) still overestimated its backward by 25 % and a GPipe
# h=256 s=226 case by 16 %, against -12 % with L3-warm timings only (docs/EMULATOR.md).
_evict_buffer = []


def cache_bytes(level: int) -> int:
    """Size of cpu0's cache of this level (Linux sysfs); 512 KiB (L2) / 32 MiB (L3) when unknown."""
    import glob
    for idx in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(idx + "/level") as fh:
                lv = int(fh.read())
            with open(idx + "/size") as fh:
                text = fh.read().strip()
        except (OSError, ValueError):
            continue
        if lv == level and text[:-1].isdigit():
            return int(text[:-1]) * {"K": 2**10, "M": 2**20}.get(text[-1], 1)
    return {2: 512 * 2**10, 3: 32 * 2**20}.get(level, 2**20)


def evict_caches() -> None:
    """Write 4x the private L2: the timed op's operands then come from L3."""
    import torch
    if not _evict_buffer:
        _evict_buffer.append(torch.zeros(cache_bytes(2)))      # 4 bytes per element: 4x L2
    _evict_buffer[0].add_(1.0)


def time_cpu(fn, budget_s: float, min_n: int = 3, max_n: int = 100) -> list[float]:
    """Seconds per call with the private caches flushed: one warm-up, then repeat until min_n calls and
    budget_s have passed. Timed in this thread's CPU time (CLOCK_THREAD_CPUTIME_ID): torch on
    one thread runs an op entirely in the calling thread, so this is the op's own time, without
    what other processes of a shared machine take from the core meanwhile (wall time would
    include it, at whatever load the machine had at that moment)."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_n and (len(times) < min_n or time.perf_counter() - start < budget_s):
        evict_caches()
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return times


def time_cuda(fn, quick: bool) -> list[float]:
    """Seconds per call from triton.testing.do_bench (clears L2 before every call)."""
    from triton.testing import do_bench
    ms = do_bench(fn, warmup=10 if quick else 25, rep=30 if quick else 100, return_mode="all")
    return [t / 1e3 for t in ms]


def measurement(op: str, shape: dict, times: list[float], impl: str | None = None) -> Measurement:
    median, p10, p90 = summarize(times)
    tflops, gbps = throughput_fields(op, shape, median)
    return Measurement(op, dict(shape), median, p10, p90, len(times), tflops, gbps, impl)


# --- the whole run --------------------------------------------------------------------------------

def calibrate(device: str = "cpu", scenario=None, quick: bool = False, threads: int = 1,
              comm: bool = True, progress: Progress | None = None, grid: bool = False) -> CostProfile:
    """Measure and return a CostProfile (not yet written). ProfileError when the device cannot
    be used (e.g. --device cuda without a GPU)."""
    try:
        import torch
    except ImportError:
        raise ProfileError("pipesim calibrate needs torch (pip install 'pipesim[torch]')") from None
    if device not in ("cpu", "cuda"):
        raise ProfileError(f"--device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ProfileError("--device cuda: no CUDA device is visible here; use --device cpu")

    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        items, notes = plan(device, scenario, quick, grid)
        sizes = comm_sizes(device, quick) if comm else []
        total = len(items) + (1 if sizes else 0)
        out = measure_ops(items, device, quick, notes, progress, total)
        if sizes:
            if progress:
                progress(len(items), total, "sendrecv/allreduce between 2 processes")
            rows, note = measure_comm(sizes, device, budget_s=CPU_BUDGET_S[0 if quick else 1], threads=threads)
            if note:
                notes.append(note)
            out += [measurement(op, shape, times) for op, shape, times in rows]
        if progress:
            progress(total, total, "done")
    finally:
        torch.set_num_threads(old_threads)
    info = device_info(device, threads)
    if notes:
        info["notes"] = notes
    return CostProfile(device=info, measurements=out, created=info["date"])


def measure_ops(items, device: str, quick: bool, notes: list, progress: Progress | None = None,
                total: int | None = None, budget_s: float | None = None) -> list[Measurement]:
    """Time every (op, shape) of `items` on this device in this process (its current torch
    thread count); an op that cannot run here is a note, not a failure."""
    import torch
    from pipesim.calibrate.ops import make_runner
    total = total or len(items)
    out: list[Measurement] = []
    budget = budget_s if budget_s is not None else CPU_BUDGET_S[0 if quick else 1]
    max_call = CPU_MAX_CALL_S[0 if quick else 1]
    rates: dict = {}  # (op, categorical keys) -> measured seconds per unit of work
    done: set = set()
    for i, (op, shape) in enumerate(items):
        if device == "cpu":
            spw = _cpu_seconds_per_work(op, shape, rates, max_call, make_runner)
            small = shrink(op, shape, spw, max_call)
            if small != shape:
                notes.append(f"{_label(op, shape)} measured at reduced size "
                             f"{_label(op, small).split(' ', 1)[1]}")
                shape = small
        key = (op, tuple(sorted(shape.items())))
        if key in done:
            continue
        done.add(key)
        if progress:
            progress(i, total, _label(op, shape))
        fn = None
        try:
            fn, impl = make_runner(op, shape, device)
            times = time_cuda(fn, quick) if device == "cuda" else time_cpu(fn, budget)
        except Exception as exc:  # noqa: BLE001 - out of memory, dtype unsupported, a kernel
            # that does not compile here: one op missing is a stated gap, not a failed run
            notes.append(f"{_label(op, shape)} not measured: {str(exc).splitlines()[0][:120]}")
            continue
        finally:
            fn = None
            if device == "cuda":
                torch.cuda.empty_cache()
        out.append(measurement(op, shape, times, impl))
    return out


def _label(op: str, shape: dict) -> str:
    return op + " " + " ".join(f"{k}={v}" for k, v in shape.items())
