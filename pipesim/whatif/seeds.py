"""The seeds as scenarios: what the seed experiments measured, transcribed into the repo
(scenarios/seeds/*_measured.csv), and pipesim's prediction beside it.

seed 002: GPT-2 (89.8 M parameters, batch 64) on 4 V100, K partitions x M micro-batches x
          checkpointing, GPipe (self-written and torchgpipe): per-device peak memory, throughput.
seed 004: data parallel vs pipeline on 2-8 GPUs (RoBERTa, MobileNetV2, ResNet) and activation
          compression between stages at 16/12/8/4 bits: speed-up ratios and receive bandwidth.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

from pipesim.errors import ScenarioError

SEEDS_DIR = Path(__file__).resolve().parents[2] / "scenarios" / "seeds"
GiB, MiB = 2**30, 2**20


# ---------------------------------------------------------------- seed 002 --------------------

def parse_seed002(text: str) -> list[dict]:
    """One row per run of benchmarks/memory_expr.py in the seed log."""
    rows = []
    for block in text.split("Running: ")[1:]:
        cfg = dict(re.findall(r"^(num_partitions|num_microbatches|checkpoint_enabled|use_torchgpipe): (\S+)$",
                              block, re.M))
        if len(cfg) < 4:
            continue
        tail = block.split("Max memory per device:")[-1]
        per_dev = [int(x.replace(",", "")) for x in re.findall(r"^cuda:\d+: ([\d,]+) Bytes", tail, re.M)]

        def num(label):
            m = re.search(rf"{label}: ([\d.,]+)", block)
            return float(m.group(1).replace(",", "")) if m else None
        rows.append({"K": int(cfg["num_partitions"]), "M": int(cfg["num_microbatches"]),
                     "checkpoint": cfg["checkpoint_enabled"] == "True",
                     "impl": "torchgpipe" if cfg["use_torchgpipe"] == "True" else "self",
                     "params": int(num("# of Model Parameters")),
                     "peak_activation_bytes": int(num("Peak Activation Memory")),
                     "total_memory_bytes": int(num("Total Memory")),
                     "forward_s": num("Average Forward Time"), "backward_s": num("Average Backward Time"),
                     "throughput": num("Throughput"),
                     "max_device_bytes": max(per_dev) if per_dev else None,
                     "per_device_bytes": ";".join(str(b) for b in per_dev)})
    return rows


def write_measured(rows: list[dict], path, source: str) -> None:
    with open(path, "w", newline="") as fh:
        fh.write(f"# transcribed from {source}\n")
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def read_measured(path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: measured table not found")
    lines = [l for l in path.read_text().splitlines() if not l.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        row = {}
        for k, v in r.items():
            if v in ("True", "False"):
                row[k] = v == "True"
            else:
                try:
                    row[k] = int(v)
                except ValueError:
                    try:
                        row[k] = float(v)
                    except ValueError:
                        row[k] = v
        out.append(row)
    return out


def seed002_predict(K: int, M: int, checkpoint: bool, evaluator=None) -> dict:
    """pipesim's prediction for one (K, M, checkpoint) cell of seed 002."""
    from pipesim.scenario.load import load_scenario
    from pipesim.whatif.evaluate import simulate_report
    evaluator = evaluator or simulate_report
    s = load_scenario(SEEDS_DIR / "002_gpt2_v100.yaml",
                      [f"parallel.pipeline={K}", f"system.gpus_per_node={K}",
                       f"training.micro_batch_size={64 // M}", f"training.recompute={'full' if checkpoint else 'none'}"])
    rep = evaluator(s, "representative")
    ranks = rep.get("ranks") or []
    per_dev = [r["peak_memory_bytes"] for r in ranks] or [rep["peak_memory_bytes"]]
    static = [sum((r.get("peak_memory_by_category") or {}).get(k, 0.0) for k in ("weights", "gradients", "optimizer"))
              for r in ranks] or [0.0]
    return {"throughput": rep["throughput_samples_per_s"], "max_device_bytes": max(per_dev),
            "per_device_bytes": per_dev, "static_bytes": static, "step_time_s": rep["step_time_s"],
            "oom": rep.get("oom", False)}


def except_last(ckpt: dict, none: dict, M: int) -> float:
    """torchgpipe's checkpoint="except_last": M-1 micro-batches keep checkpoints, the last keeps its
    full activations (M = 1: nothing is checkpointed). Per device: static + (M-1)/M of the
    checkpointed activations + 1/M of the uncheckpointed ones (GPipe holds all M)."""
    out = []
    for c, n, st in zip(ckpt["per_device_bytes"], none["per_device_bytes"], ckpt["static_bytes"]):
        out.append(st + (M - 1) / M * (c - st) + (n - st) / M)
    return max(out)


def seed002_table(measured: list[dict], evaluator=None) -> list[dict]:
    """Measured (both implementations) next to predicted, per (K, M, checkpoint)."""
    cells = {}
    for r in measured:
        cells.setdefault((r["K"], r["M"], r["checkpoint"]), {})[r["impl"]] = r
    out = []
    for (K, M, ck), impls in sorted(cells.items()):
        p = seed002_predict(K, M, ck, evaluator)
        row = {"K": K, "M": M, "checkpoint": ck, "pred_throughput": p["throughput"],
               "pred_max_device_MiB": p["max_device_bytes"] / MiB}
        if ck:
            row["pred_except_last_MiB"] = except_last(p, seed002_predict(K, M, False, evaluator), M) / MiB
        for impl in ("self", "torchgpipe"):
            m = impls.get(impl)
            if m is None:
                continue
            row[f"{impl}_throughput"] = m["throughput"]
            row[f"{impl}_max_device_MiB"] = m["max_device_bytes"] / MiB
        ref = impls.get("torchgpipe") or impls.get("self")
        row["err_throughput_pct"] = 100 * (p["throughput"] / ref["throughput"] - 1)
        row["err_memory_pct"] = 100 * (p["max_device_bytes"] / ref["max_device_bytes"] - 1)
        if ck:
            row["err_except_last_pct"] = 100 * (row["pred_except_last_MiB"] * MiB / ref["max_device_bytes"] - 1)
        out.append(row)
    return out


# ---------------------------------------------------------------- seed 004 --------------------

# The seed's rows (004_*.txt, tables 1 and 3): experiment, model, GPUs, batch, chunks (pipeline
# micro-batches; None for data parallel), measured samples/s, measured speed-up, and the row
# the seed's speed-up is relative to.
SEED004_ROWS = [
    # model,        mode,  gpus, batch, chunks, samples/s, speed-up
    ("mobilenetv2", "pp", 2, 64, 4, 228.57, 0.607),
    ("mobilenetv2", "dp", 2, 64, None, 376.47, 1.0),
    ("mobilenetv2", "pp", 4, 256, 4, 400.30, 1.07),
    ("mobilenetv2", "pp", 4, 256, 8, 397.30, 1.06),
    ("mobilenetv2", "dp", 4, 256, None, 627.22, 1.66),
    ("roberta-base", "pp", 2, 32, 4, 61.53, 0.80),
    ("roberta-base", "dp", 2, 32, None, 76.19, 1.0),
    ("roberta-base", "pp", 4, 64, 4, 106.40, 1.40),
    ("roberta-base", "pp", 4, 64, 2, 96.40, 1.01),
    ("roberta-base", "dp", 4, 64, None, 95.53, 1.25),
    ("resnet50", "dp", 2, 256, None, 180.344, 1.0),
    ("resnet50", "dp", 8, 1024, None, 606.916, 3.365),
    ("resnet50", "pp", 2, 256, 8, 117.432, 0.651),
    ("resnet50", "pp", 8, 1024, 8, 294.739, 1.634),
    ("resnet50", "pp", 8, 4096, 8, 378.746, 2.100),
]
# Inputs per model: RoBERTa on RTE at 128 tokens (the seed's activation shape [32,128,768]);
# MobileNetV2 on CIFAR-10 (32x32); ResNet-50 on ImageNet (224x224).
SEED004_INPUT = {"mobilenetv2": "cifar10", "resnet50": "imagenet"}


def seed004_scenario(model: str, mode: str, gpus: int, batch: int, chunks, bits: int = 16) -> dict:
    pipe = gpus if mode == "pp" else 1
    data = 1 if mode == "pp" else gpus
    micro = batch // chunks if mode == "pp" else batch // gpus
    # The seed's cards: 8 GB Pascal GPUs in one PCIe box (its nvidia-smi shows 8112 MiB).
    raw = {"model": {"preset": "roberta-base", "seq_length": 128},
           "system": {"preset": "gtx-1070", "num_nodes": 1, "gpus_per_node": gpus},
           "parallel": {"tensor": 1, "pipeline": pipe, "data": data},
           "training": {"micro_batch_size": micro, "global_batch_size": batch, "schedule": "gpipe",
                        "precision": "fp32", "optimizer": "sgd", "activation_compression_bits": bits,
                        "overlap_grad_reduce": True}}
    if model != "roberta-base" and pipe > 1:
        # CNN stages come from pipesim.partition (layers_per_stage does not apply to the
        # placeholder transformer); 12 layers must split over the pipeline for the loader.
        raw["model"]["num_layers"] = 12 if 12 % pipe == 0 else 8 * pipe
    return raw


def seed004_predict(model: str, mode: str, gpus: int, batch: int, chunks, bits: int = 16) -> dict:
    from pipesim.scenario.load import load_scenario
    from pipesim.sim import simulate
    s = load_scenario(seed004_scenario(model, mode, gpus, batch, chunks, bits))
    costs = None
    if model != "roberta-base":
        from pipesim.partition import cnn_stage_costs
        t = s.training
        costs = cnn_stage_costs(model, system=s.system, micro_batch_size=t.micro_batch_size,
                                pipeline=s.parallel.pipeline, data=s.parallel.data, precision=t.precision,
                                input_name=SEED004_INPUT[model], optimizer=t.optimizer,
                                activation_compression_bits=t.activation_compression_bits)
    rep = simulate(s, mode="representative", trace=False, stage_costs=costs).to_dict()
    return {"throughput": rep["throughput_samples_per_s"], "step_time_s": rep["step_time_s"],
            "bubble_fraction": rep["bubble_fraction"], "oom": rep.get("oom", False),
            "peak_memory_bytes": rep["peak_memory_bytes"]}


def seed004_table() -> list[dict]:
    out, base = [], {}
    preds = []
    for model, mode, gpus, batch, chunks, measured, speedup in SEED004_ROWS:
        p = seed004_predict(model, mode, gpus, batch, chunks)
        preds.append(p)
        if speedup == 1.0:
            base[model] = p["throughput"]
    for (model, mode, gpus, batch, chunks, measured, speedup), p in zip(SEED004_ROWS, preds):
        pred_speedup = p["throughput"] / base[model]
        out.append({"model": model, "mode": mode, "gpus": gpus, "batch": batch, "chunks": chunks or "-",
                    "measured_samples_s": measured, "pred_samples_s": p["throughput"],
                    "measured_speedup": speedup, "pred_speedup": pred_speedup,
                    "err_speedup_pct": 100 * (pred_speedup / speedup - 1), "pred_bubble": p["bubble_fraction"],
                    "pred_oom": p["oom"]})
    return out


# The seed's ablation (table 4): RoBERTa on RTE, batch 32 (4 chunks of 8), activation [8,128,768]
# per chunk crossing the stage boundary; "bandwidth" = received bytes / receive time.
SEED004_BANDWIDTH = {16: 11.04, 12: 8.19, 8: 5.37, 4: 2.774}


def seed004_compression() -> list[dict]:
    """Per bit width: bytes per message, pipesim's receive time and bandwidth (α-β on the
    stage link) vs the seed's bandwidth, and the simulated step speed-up from compressing.
    Bytes follow the seed's definition (its "compression ratio" 0.5 at 16 bits is relative to
    fp32): one chunk's activation [8, 128, 768] at `bits` per element."""
    from pipesim.costs.collectives import p2p_time
    from pipesim.costs.topology import stage_link
    from pipesim.scenario.load import load_scenario
    out, base = [], None
    for bits in (16, 12, 8, 4):
        s = load_scenario(seed004_scenario("roberta-base", "pp", 2, 32, 4, bits))
        nbytes = s.training.micro_batch_size * s.model.seq_length * s.model.hidden_size * bits / 8
        t = p2p_time(nbytes, stage_link(s, 0, 1))
        p = seed004_predict("roberta-base", "pp", 2, 32, 4, bits)
        base = base or p["throughput"]
        out.append({"bits": bits, "send_MB": nbytes / 1e6, "pred_recv_GBps": nbytes / t / 1e9,
                    "measured_recv_GBps": SEED004_BANDWIDTH[bits],
                    "measured_recv_time_ms": nbytes / (SEED004_BANDWIDTH[bits] * 1e9) * 1e3,
                    "pred_recv_time_ms": t * 1e3, "pred_speedup_vs_16bit": p["throughput"] / base})
    return out


def format_rows(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """Markdown table: cols = (key, header, format)."""
    head = "| " + " | ".join(h for _, h, _ in cols) + " |"
    sep = "|" + "|".join("---:" for _ in cols) + "|"
    body = []
    for r in rows:
        cells = []
        for key, _, fmt in cols:
            v = r.get(key)
            cells.append("-" if v is None else (fmt.format(v) if fmt else str(v)))
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, sep, *body])


SEED002_COLUMNS = [("K", "K", ""), ("M", "M", ""), ("checkpoint", "ckpt", ""),
                   ("self_throughput", "self samples/s", "{:.0f}"), ("torchgpipe_throughput", "torchgpipe samples/s", "{:.0f}"),
                   ("pred_throughput", "pipesim samples/s", "{:.0f}"), ("err_throughput_pct", "err %", "{:+.0f}"),
                   ("self_max_device_MiB", "self max MiB", "{:.0f}"),
                   ("torchgpipe_max_device_MiB", "torchgpipe max MiB", "{:.0f}"),
                   ("pred_max_device_MiB", "pipesim max MiB", "{:.0f}"), ("err_memory_pct", "err %", "{:+.0f}"),
                   ("pred_except_last_MiB", "pipesim except_last MiB", "{:.0f}"),
                   ("err_except_last_pct", "err %", "{:+.0f}")]
SEED004_COLUMNS = [("model", "model", ""), ("mode", "mode", ""), ("gpus", "GPUs", ""), ("batch", "batch", ""),
                   ("chunks", "chunks", ""), ("measured_samples_s", "seed samples/s", "{:.1f}"),
                   ("pred_samples_s", "pipesim samples/s", "{:.1f}"), ("measured_speedup", "seed speed-up", "{:.2f}"),
                   ("pred_speedup", "pipesim speed-up", "{:.2f}"), ("err_speedup_pct", "err %", "{:+.0f}"),
                   ("pred_bubble", "bubble", "{:.2f}"), ("pred_oom", "pipesim OOM", "")]
COMPRESSION_COLUMNS = [("bits", "bits", ""), ("send_MB", "MB per message", "{:.2f}"),
                       ("measured_recv_GBps", "seed GB/s", "{:.2f}"), ("pred_recv_GBps", "pipesim GB/s", "{:.2f}"),
                       ("measured_recv_time_ms", "seed recv ms", "{:.3f}"), ("pred_recv_time_ms", "pipesim recv ms", "{:.3f}"),
                       ("pred_speedup_vs_16bit", "step speed-up", "{:.3f}")]


def seed_report(name: str) -> str:
    """Markdown side-by-side tables for `pipesim validate seed-002 | seed-004`."""
    if name == "seed-002":
        rows = seed002_table(read_measured(SEEDS_DIR / "002_measured.csv"))
        return "seed 002: GPT-2 K x M x checkpointing on 4 V100 (measured vs pipesim)\n" + format_rows(rows, SEED002_COLUMNS)
    if name == "seed-004":
        return ("seed 004: data parallel vs pipeline (speed-up relative to data parallel on 2 GPUs)\n"
                + format_rows(seed004_table(), SEED004_COLUMNS)
                + "\n\nseed 004: activation compression, RoBERTa pipeline on 2 GPUs\n"
                + format_rows(seed004_compression(), COMPRESSION_COLUMNS))
    raise ScenarioError(f"unknown seed report {name!r}; known: seed-002, seed-004")
