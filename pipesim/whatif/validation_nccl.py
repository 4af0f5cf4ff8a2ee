"""Suite nccl: all-reduce bus bandwidth of the collective model against the nccl-tests figures in
published.yaml (entries of kind collective_bandwidth; no target)."""
from __future__ import annotations

from pipesim.whatif.validation import DEFAULT_FILE, read_cases

# Case id -> (system preset, system overrides, GPUs, nodes, measured key). Bus bandwidth as
# nccl-tests defines it for all-reduce: busbw = algbw · 2(n-1)/n (NVIDIA nccl-tests
# doc/PERFORMANCE.md), so a bandwidth-optimal ring shows the per-GPU link bandwidth. Measured
# at large messages; pipesim is evaluated at 4 GiB. Cases without a system preset (H100 PCIe with
# an NVLink bridge) are listed as not converted.
NCCL_CASES = {
    "nccl-a100-8gpu-a": ("dgx-a100-80gb", {}, 8, 1, "busbw_GBps_measured"),
    "nccl-a100-8gpu-b": ("dgx-a100-80gb", {}, 8, 1, "busbw_GBps_measured_approx"),
    # 2 DGX-class nodes with 4 HDR NICs each: 4 x 25 GB/s over 8 GPUs = 12.5 GB/s per GPU.
    "nccl-a100-2node-4nic": ("dgx-a100-80gb", {"inter_node": {"bandwidth_GBps": 12.5}}, 16, 2,
                             "busbw_GBps_measured"),
    # A800: NVLink cut to 400 GB/s total (200 per direction); one HDR NIC per node.
    "nccl-a800-guidance": ("dgx-a100-80gb", {"intra_node": {"bandwidth_GBps": 200}}, 8, 1,
                           "intra_node_busbw_GBps_expected"),
    # The ring's figure on NVLink4 (NVLS off): the NVLS one, 480, is the preset's own source.
    "nccl-h100-8gpu-nvls": ("dgx-h100", {"intra_node": {"nvls_GBps": None}}, 8, 1,
                            "effective_nvlink_busbw_ring_or_non_allreduce_GBps"),
    "nccl-h200-8gpu": ("dgx-h200", {}, 8, 1, "peak_busbw_GBps_measured"),
}
NCCL_MESSAGE = 4 * 2**30


def collective_results(path=None) -> list[dict]:
    from pipesim.costs.collectives import collective_time
    from pipesim.costs.topology import placement
    from pipesim.scenario.load import load_scenario
    out = []
    for c in read_cases(path or DEFAULT_FILE):
        if c.get("kind") != "collective_bandwidth":
            continue
        spec = NCCL_CASES.get(c.get("id"))
        if spec is None:
            out.append({"id": c["id"], "note": "not converted: no system preset for " +
                        str(c.get("hardware", {}).get("description", "?"))})
            continue
        preset, over, n, nodes, key = spec
        measured = float(c["measured"][key])
        s = load_scenario({"model": {"preset": "gpt2-small"},
                           "system": {"preset": preset, "num_nodes": nodes, "gpus_per_node": n // nodes, **over},
                           "parallel": {"tensor": 1, "pipeline": 1, "data": n},
                           "training": {"micro_batch_size": 1, "global_batch_size": n}})
        secs = collective_time("all_reduce", NCCL_MESSAGE, placement(s, "dp"), s.parallel.collective)
        busbw = NCCL_MESSAGE / secs * 2 * (n - 1) / n / 1e9
        note = {"nccl-h100-8gpu-nvls": "ring figure (NVLS off); NVLS's 480 is the preset's source",
                "nccl-h200-8gpu": "NVLS (NVLink SHARP), measured by a user against the preset's 480"}.get(c["id"], "")
        out.append({"id": c["id"], "gpus": n, "nodes": nodes, "measured_GBps": measured, "pred_GBps": busbw,
                    "error_pct": 100 * (busbw / measured - 1), "note": note, "source": c["source"]["ref"]})
    return out


def format_collectives(rows: list[dict]) -> str:
    lines = ["nccl  (all-reduce bus bandwidth, GB/s, 4 GiB message; no target)",
             f"  {'case':26s} {'GPUs':>4s} {'nodes':>5s} {'pred':>6s} {'pub':>6s} {'err %':>7s}"]
    for r in rows:
        if "pred_GBps" not in r:
            lines.append(f"  {r['id']:26s} {r['note']}")
            continue
        lines.append(f"  {r['id']:26s} {r['gpus']:>4} {r['nodes']:>5} {r['pred_GBps']:>6.1f} {r['measured_GBps']:>6.1f} "
                     f"{r['error_pct']:>+7.1f}" + (f"  {r['note']}" if r["note"] else ""))
    errs = [abs(r["error_pct"]) for r in rows if "error_pct" in r]
    lines.append(f"  MAPE {sum(errs) / len(errs):.1f} %" if errs else "  no cases")
    return "\n".join(lines)
