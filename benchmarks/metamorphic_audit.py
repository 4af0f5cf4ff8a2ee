"""Metamorphic audit: relations every prediction must keep, checked on every bundled scenario and
every published validation run (written to a temporary folder by `pipesim validate
--write-scenarios`).

  - better hardware never slows a step: twice the inter-node or NVLink bandwidth, a tenth of the
    link latencies, twice the HBM bandwidth, twice the matrix peak;
  - worse hardware never speeds one up: four times the link latencies;
  - an overlap never slows one: overlap_grad_reduce, overlap_param_gather, overlap_tp_comm,
    moe_a2a_overlap, moe_shared_expert_overlap on, p2p_sync off (each where the scenario loads
    with it);
  - ZeRO-3 never needs more memory than ZeRO-2.

A violation beyond `--tolerance` (default 0.05 %: the ports can reorder transfers, which moves
a step by a few hundredths of a percent either way) is printed with its figures. Found so far (each
fixed with a test beside it): the ZeRO-1/2 parameter all-gather's MoE time ratio taken at the
wrong size (a 4x slower network made gpt-oss-120b 7 % faster), matrix peaks the kernel curves
ignored, ZeRO-3's gathered layers counted twice, the MoE all-to-all overlap simulated on plain
1F1B over stages (66 % slower; now refused, as Megatron-Core refuses it), pipeline sends queued
behind whole gradient buckets on one FIFO port (a tenth of the link latencies made GPT-3 175B on
8,192 H100 3 % slower and 10 such violations in all; sends now share the port: sim/network.py
Port.send). Left (283 scenarios): Llama 3.1 405B on 2,496 GB200 is 0.2 % slower with a tenth of
the latencies; its pipeline sends meet the reordered gradient buckets more often (P2P exposed 39 ->
42 ms), a list-scheduling anomaly rather than a wrong cost. Since MXFP8 GEMMs run at their
block-scaled rate (session 32) Megatron-Bridge 25.11's Llama 3.1 405B MXFP8 on 128 B200 (TP 4, PP 8,
VP 8) shows the same: 0.4 % slower with a tenth of the latencies while every other exposed term
shrinks (TP 113.5 -> 108.0 ms, DP 21.2 -> 20.0 ms) and the pipeline sends' share of the bubble
grows (1.0 -> 1.3 %). Since HybridEP runs at its SMs' rate on Blackwell (session 34), gpt-oss-120b
MXFP8 on 64 B300 (bridge2606) is 0.06 % slower with twice the NVLink bandwidth: its all-to-all is
bound by the kernel, not the link (404.4 ms exposed either way), and the faster gradient traffic
leaves the ZeRO parameter all-gather 1.7 ms more exposed - the same reordering, not a cost.

SM contention (session 36, sim/interference.py) makes three of these relations false by its
physics, and the default run lists them (190 in 185 scenarios): an overlapped gradient reduction
slows the backward beside it, so on Hopper, where that backward runs 1.5-1.8x slower, a deep
pipeline's cooldown can lose more than the overlap hides (overlap_grad_reduce on: up to +4.7 %,
Megatron-Core's 462B on PP 16; without it each rank reduces after its last backward, beside no
compute); twice the NIC or NVLink bandwidth lets NCCL find twice the channels (costs/nccl_channels.py
ring_ctas), so the collectives hold twice the SMs for half as long, which costs the same SM-seconds
but not the same wave count (up to +3.9 %). `--set training.collective_sm_contention=false` checks
the relations on the same scenarios without that term: the three above, and Qwen3-235B with EP 8
under FSDP (moezoo) 0.3 % slower with a tenth of the latencies and 0.5 % faster with four times
them. Its per-layer reductions carry the experts' bytes at their expert-data-parallel time ratio
(costs/moe.py edp_ratio, now taken at the layer's size), and one affine collective over
equivalent bytes is not the two collectives it stands for when the latencies move (218 s).

    python benchmarks/metamorphic_audit.py [--jobs 2] [--tolerance 0.05] [--set KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def faster(s) -> list[tuple[str, list[str]]]:
    """(name, overrides) that must not lengthen the step of scenario `s`."""
    sy, g = s.system, s.system.gpu
    peaks = [f"system.gpu.peak_tflops_{d}={v / 1e12 * 2}"
             for d, v in (("fp16", g.peak_fp16), ("bf16", g.peak_bf16), ("fp8", g.peak_fp8)) if v]
    return [("inter-node bandwidth x2", [f"system.inter_node.bandwidth_GBps={sy.inter_node.bandwidth / 1e9 * 2}"]),
            ("NVLink bandwidth x2", [f"system.intra_node.bandwidth_GBps={sy.intra_node.bandwidth / 1e9 * 2}"]),
            ("link latencies / 10", latencies(sy, 0.1)),
            ("HBM bandwidth x2", [f"system.gpu.hbm_bandwidth_GBps={g.hbm_bandwidth / 1e9 * 2}"]),
            ("matrix peaks x2", peaks)]


# (key, the value that overlaps): switching each on must not lengthen the step
OVERLAPS = (("training.overlap_grad_reduce", "true"), ("training.overlap_param_gather", "true"),
            ("training.overlap_tp_comm", "true"), ("training.moe_a2a_overlap", "true"),
            ("training.moe_shared_expert_overlap", "true"), ("training.p2p_sync", "false"))


def latencies(sy, k: float) -> list[str]:
    return [f"system.inter_node.latency_us={sy.inter_node.latency * 1e6 * k}",
            f"system.intra_node.latency_us={sy.intra_node.latency * 1e6 * k}"]


def audit(path: str, tol: float, fixed: tuple = ()) -> tuple[str, list[str]]:
    """(scenario name, violations) of one scenario file, `fixed` overrides applied to every run."""
    import pipesim
    from pipesim.errors import PipesimError
    os.chdir(os.path.dirname(path))            # relative preset / model files resolve beside it

    def run(overrides=()):
        return pipesim.simulate(pipesim.load_scenario(path, overrides=list(fixed) + list(overrides)), trace=False)

    name, bad = os.path.basename(path), []
    try:
        s = pipesim.load_scenario(path, overrides=list(fixed))
        base = run().step_time_s
    except PipesimError:
        return name, []                         # a scenario that does not load has nothing to keep
    for label, overrides in faster(s):
        step = run(overrides).step_time_s
        if step > base * (1 + tol):
            bad.append(f"{label}: step {base:.4f} -> {step:.4f} s")
    step = run(latencies(s.system, 4.0)).step_time_s
    if step < base * (1 - tol):
        bad.append(f"link latencies x4: step {base:.4f} -> {step:.4f} s")
    for key, on in OVERLAPS:
        off = "false" if on == "true" else "true"
        try:
            a, b = (run([f"{key}={v}"]).step_time_s for v in (off, on))
        except PipesimError:
            continue                            # the scenario does not allow it (e.g. no experts)
        if b > a * (1 + tol):
            bad.append(f"{key}={on}: step {a:.4f} -> {b:.4f} s")
    try:
        z2, z3 = (run([f"training.zero_stage={z}"]).peak_memory_bytes for z in (2, 3))
    except PipesimError:
        z2 = z3 = 0.0
    if z3 > z2 * (1 + tol):
        bad.append(f"ZeRO-3 peak memory {z3 / 2**30:.2f} GiB > ZeRO-2 {z2 / 2**30:.2f} GiB")
    return name, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.05, help="percent")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for every run (e.g. training.collective_sm_contention=false)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pipesim-audit-") as tmp:
        subprocess.run([sys.executable, "-m", "pipesim", "validate", "--write-scenarios", tmp],
                       check=True, capture_output=True, cwd=ROOT)
        files = sorted(str(p) for p in Path(tmp).glob("*.yaml"))
        files += sorted(str(p) for p in (ROOT / "scenarios").glob("*.yaml"))
        files += sorted(str(p) for p in (ROOT / "scenarios" / "longseq").glob("*.yaml"))
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(audit, files, [args.tolerance / 100] * len(files),
                                    [tuple(args.set)] * len(files)))
    bad = [(n, v) for n, v in results if v]
    print(f"{len(results)} scenarios, {sum(len(v) for _, v in bad)} violations in {len(bad)} of them "
          f"(tolerance {args.tolerance} %), {time.perf_counter() - t0:.0f} s")
    for name, violations in bad:
        for v in violations:
            print(f"  {name}: {v}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
