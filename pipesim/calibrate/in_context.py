"""Op costs as the ops run inside the model (CPU emulator ranks): the rank's own stages run a few
forwards and backwards at the scenario's shapes while a dispatch mode times every aten call in
thread CPU time; the calls are mapped onto the profile's (op, shape) keys and their medians
replace the same keys timed in isolation.

Why: timed alone (pipesim.calibrate.run.time_cpu: L2 flushed, operands in L3) the ops of shape A's
first stage, with the host model, added up to 76 % of its forward's and 87 % of its backward's
CPU time inside the model, measured minutes apart in the same process at load 2.4 (issue 16, docs/EMULATOR.md "Where the in-model cost went"). The gap is not
in how the model calls them (transposed weights, the bias folded into addmm, strided attention
operands: all within +-5 % of the calibrated calls, interleaved), but in where their operands
and outputs are: the ranks' working sets (weights, gradients, saved activations: 37-67 MB per
rank for issue 16's shapes A and B) outgrow their share of the 32 MB L3, so inside the model a
part of every op's operands and output lines come from DRAM, by an amount that moves with what
else shares the L3. Timing the calls where they run measures that state instead of guessing it
(per-op costs taken from a trace of the model's own run, as Daydream does from a profiled
iteration: Zhu et al., "Daydream: Accurately Estimating the Efficacy of Optimizations for DNN
Training", USENIX ATC 2020). A `mul` in a backward is costed as a copy of its size (the logits'
scalings; a rotary or gated-MLP multiply of the same size lands on the same key, which is
about as fast).

Mapping (aten call -> profile key), matched against the keys the cost model will look up:
  addmm(bias, A[m,k], B[k,n])          gemm m,k,n, less the isolated bias_fwd of (m, n)
  mm(A[m,k], B[k,n]), addmm_(C, A, B)  gemm m,k,n or its transpose n,k,m (the weight gradient)
  bmm / baddbmm [b,m,k] x [b,k,n]      bmm batch=b (or its transpose), bias = baddbmm
  _softmax / _softmax_backward_data    softmax_fwd / softmax_bwd over rows of the last dim
  native_layer_norm(_backward)         layer_norm_fwd / layer_norm_bwd
  gelu / gelu_backward                 gelu_fwd / gelu_bwd
  sum(gy[m,n]) in a backward           bias_bwd rows=m, cols=n
  clone (forward), cat, mul (backward) copy of their output's bytes (pipesim/costs/eager_copies.py)
  _log_softmax + nll_loss_forward      cross_entropy_fwd tokens, vocab (and their backwards: _bwd)
Calls that match no key (views, copies, residual adds) are left to the host model (dispatch
term) and the roofline, as before.
"""
from __future__ import annotations

import statistics
import time
from collections import defaultdict

# torch's cross_entropy on CPU: log_softmax then nll_loss, and their backwards
CE_PARTS = {"_log_softmax": "cross_entropy_fwd", "nll_loss_forward": "cross_entropy_fwd",
            "nll_loss_backward": "cross_entropy_bwd", "_log_softmax_backward_data": "cross_entropy_bwd"}
# every aten call samples_by_key can map onto a profile key
MAPPED = {"mm", "addmm", "addmm_", "bmm", "baddbmm", "_softmax", "_softmax_backward_data", "native_layer_norm",
          "native_layer_norm_backward", "gelu", "gelu_backward", "sum", "clone", "cat", "mul", *CE_PARTS}
# 1F1B patterns (F F B F B B) per stage: a fixed count, the same on every rank, because the
# tensor-parallel ranks of a stage meet in its collectives
PATTERNS = 3


def _shapes(args) -> list[tuple]:
    import torch
    return [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]


def _timer_mode(records: list):
    """A TorchDispatchMode that appends (aten name, argument shapes, phase, seconds, output
    bytes) per call."""
    from torch.utils._python_dispatch import TorchDispatchMode
    clock = time.thread_time_ns

    class OpTimer(TorchDispatchMode):
        phase = "fwd"

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            t0 = clock()
            out = func(*args, **(kwargs or {}))
            dt = (clock() - t0) * 1e-9
            nbytes = out.numel() * out.element_size() if hasattr(out, "numel") else 0
            records.append((func.overloadpacket.__name__, _shapes(args), self.phase, dt, nbytes))
            return out

    return OpTimer()


def trace_stages(stages: dict, shape: tuple, vocab: int, counter=None, patterns: int = PATTERNS,
                 token_seq: int | None = None) -> list:
    """Run every stage of this rank (stage -> StageModel) forward and backward in a 1F1B pattern
    (two micro-batches in flight: F F B F B B) on random inputs of the run's shapes and return the
    timed aten calls. `shape`: the activation [seq, micro_batch, hidden] a stage receives;
    `token_seq`: the first stage's token sequence (default shape's seq; under sequence parallelism
    the stages pass a 1/t shard of it)."""
    import contextlib

    import torch
    records: list = []
    mode = _timer_mode(records)
    seq, mb, hidden = shape
    hooks = counter.hooks if counter is not None else contextlib.nullcontext
    for model in stages.values():
        def forward():
            tokens = torch.randint(0, vocab, (mb, (token_seq or seq) + 1))
            x = tokens[:, :-1] if model.first else torch.randn(shape, requires_grad=True)
            mode.phase = "fwd"
            with mode:
                y = model(x, tokens[:, 1:]) if model.last else model(x)
            return y, None if model.last else torch.randn_like(y)

        def backward(pair):
            mode.phase = "bwd"
            with mode:
                torch.autograd.backward(pair[0], pair[1])

        with hooks():
            for _ in range(patterns):
                a, b = forward(), forward()
                backward(a)
                c = forward()
                backward(b)
                backward(c)
        for p in model.parameters():     # the calibration's gradients are not the step's
            if p.grad is not None:
                p.grad.zero_()
    return records


def _match(op: str, shape: dict, wanted: dict):
    """The wanted key of `op` equal to `shape` on its numeric fields (categorical fields taken
    from the wanted key), or None."""
    for key, full in wanted.get(op, ()):
        if all(full.get(k) == v for k, v in shape.items()):
            return key
    return None


def samples_by_key(records: list, items: list, bias_fwd: dict) -> dict:
    """{(op, frozen shape): [seconds]} of the timed calls that map onto the profile keys in
    `items` ([(op, shape)]); `bias_fwd`: {(rows, cols): seconds} of the isolated bias
    broadcasts, taken off the addmm calls that contain one."""
    wanted: dict = defaultdict(list)
    for op, shape in items:
        wanted[op].append((_freeze(op, shape), shape))
    out: dict = defaultdict(list)
    ce: dict = {}

    def add(op, shape, seconds, alts=()):
        for cand in (shape,) + tuple(alts):
            key = _match(op, cand, wanted)
            if key is not None:
                out[key].append(seconds)
                return

    for name, shapes, phase, sec, nbytes in records:
        if name in ("mm", "addmm", "addmm_") and len(shapes) >= 2 and len(shapes[-1]) == 2:
            (m, k), (k2, n) = shapes[-2], shapes[-1]
            if k != k2:
                continue
            if name == "addmm" and len(shapes[0]) == 1:     # forward of a linear with a bias
                sec -= bias_fwd.get((m, n), 0.0)
            if sec > 0:
                add("gemm", {"m": m, "k": k, "n": n}, sec, ({"m": n, "k": k, "n": m},))
        elif name in ("bmm", "baddbmm") and len(shapes) >= 2 and len(shapes[-1]) == 3:
            (b, m, k), (_, _, n) = shapes[-2], shapes[-1]
            # baddbmm is the logits' (with the causal mask as its bias; without a mask the
            # cost model looks the same call up as a plain bmm)
            order = (True, False) if name == "baddbmm" else (False,)
            add("bmm", {"batch": b, "m": m, "n": n, "k": k, "bias": order[0]}, sec,
                tuple({"batch": b, "m": mm, "n": nn, "k": k, "bias": bias}
                      for bias in order for mm, nn in ((m, n), (n, m)))[1:])
        elif name in ("_softmax", "_softmax_backward_data") and shapes:
            x = shapes[0]
            rows = 1
            for d in x[:-1]:
                rows *= d
            add("softmax_fwd" if name == "_softmax" else "softmax_bwd", {"rows": rows, "cols": x[-1]}, sec)
        elif name in ("native_layer_norm", "native_layer_norm_backward") and shapes:
            x = shapes[0] if name == "native_layer_norm" else shapes[1]
            rows = 1
            for d in x[:-1]:
                rows *= d
            add("layer_norm_fwd" if name == "native_layer_norm" else "layer_norm_bwd",
                {"rows": rows, "cols": x[-1]}, sec)
        elif name in ("gelu", "gelu_backward") and shapes:
            numel = 1
            for d in shapes[0]:
                numel *= d
            add("gelu_fwd" if name == "gelu" else "gelu_bwd", {"numel": numel}, sec)
        elif name == "sum" and phase == "bwd" and shapes and len(shapes[0]) == 2:
            add("bias_bwd", {"rows": shapes[0][0], "cols": shapes[0][1]}, sec)
        elif (name == "clone" and phase == "fwd") or (name in ("cat", "mul") and phase == "bwd"):
            add("copy", {"bytes": nbytes}, sec)        # the layout copies of costs/eager_copies.py
        elif name in CE_PARTS and any(len(x) == 2 for x in shapes):
            logits = next(x for x in shapes if len(x) == 2)
            ce.setdefault((CE_PARTS[name], logits), defaultdict(list))[name].append(sec)
    for (op, (tokens, vocab)), parts in ce.items():
        # one cross-entropy = its parts, each at its median (they come in pairs, call by call)
        add(op, {"tokens": tokens, "vocab": vocab}, sum(statistics.median(v) for v in parts.values()))
    return out


def _freeze(op: str, shape: dict) -> tuple:
    from pipesim.costs.profile import normalize_shape
    return (op, tuple(sorted(normalize_shape(op, shape).items())))


def in_context(measurements: list, items: list, records: list, rounds: list = ()) -> tuple[list, int]:
    """The measurements (dicts, pipesim.costs.profile format) with every key that the traced
    calls cover replaced by its in-model timings (impl "torch in-model"; `mean_s` is what a cost
    lookup returns: Measurement.cost_s); returns (measurements, keys replaced).

    `records` is one trace; `rounds` more traces (lists of records) taken at other moments, e.g.
    between the emulator's timed steps. With rounds, `mean_s` is the median over the traces of
    each trace's mean: within a trace the mean, because an action costs the sum of its calls;
    across traces the median, as the step time is the median of its steps, so that a trace
    another tenant of the machine slowed down is out-voted as a slowed step is."""
    from pipesim.costs.profile import IN_MODEL, throughput_fields
    bias_fwd = {(m["shape"]["rows"], m["shape"]["cols"]): m["median_s"] for m in measurements
                if m["op"] == "bias_fwd"}
    traces = [samples_by_key(r, items, bias_fwd) for r in (records, *rounds)]
    out, replaced = [], 0
    for m in measurements:
        key = _freeze(m["op"], m["shape"])
        per_trace = [tr[key] for tr in traces if tr.get(key)]
        if not per_trace:
            out.append(m)
            continue
        times = sorted(x for tr in per_trace for x in tr)
        med = statistics.median(times)
        tflops, gbps = throughput_fields(m["op"], m["shape"], med)
        out.append(dict(m, median_s=med, p10_s=times[len(times) // 10], p90_s=times[(9 * len(times)) // 10],
                        n=len(times), tflops=tflops, gbps=gbps, impl=IN_MODEL, isolated_s=m["median_s"],
                        mean_s=statistics.median(statistics.fmean(tr) for tr in per_trace),
                        rounds=len(per_trace)))
        replaced += 1
    return out, replaced
