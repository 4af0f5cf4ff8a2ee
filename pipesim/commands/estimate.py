"""`pipesim estimate SCENARIO [--set k=v] [--csv OUT] [--json OUT]`: the per-layer analytic table."""
from __future__ import annotations

import csv
import json
import textwrap

from pipesim.costs.documents import documents_clause
from pipesim.costs.lora import lora_clause
from pipesim.report.estimate import COLUMNS, estimate
from pipesim.scenario.load import load_scenario
from pipesim.report.table import format_table

SHOWN = [("op", "op", 1), ("flops_fwd", "fwd TFLOP", 1e-12), ("flops_bwd", "bwd TFLOP", 1e-12),
         ("saved_bytes", "saved MB", 1e-6), ("weight_bytes", "weights MB", 1e-6),
         ("t_comp_fwd_s", "comp fwd ms", 1e3), ("t_mem_fwd_s", "mem fwd ms", 1e3),
         ("t_comp_bwd_s", "comp bwd ms", 1e3), ("t_mem_bwd_s", "mem bwd ms", 1e3),
         ("intensity_flop_per_byte", "FLOP/B", 1), ("comm_fwd", "comm fwd", 1),
         ("comm_bwd", "comm bwd", 1), ("comm_bytes_fwd", "comm fwd MB", 1e-6),
         ("comm_bytes_bwd", "comm bwd MB", 1e-6), ("t_comm_fwd_s", "comm fwd ms", 1e3),
         ("t_comm_bwd_s", "comm bwd ms", 1e3), ("t_fwd_s", "total fwd ms", 1e3), ("t_bwd_s", "total bwd ms", 1e3)]
WIDTH = 120
# the default view fits a 120-column terminal; --wide shows every column of SHOWN
NARROW = ("op", "flops_fwd", "flops_bwd", "saved_bytes", "weight_bytes", "intensity_flop_per_byte",
          "t_comm_fwd_s", "t_comm_bwd_s", "t_fwd_s", "t_bwd_s")


def add_arguments(p):
    p.add_argument("scenario", help="scenario YAML")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario field, e.g. parallel.tensor=4")
    p.add_argument("--csv", help="write the per-op rows as CSV")
    p.add_argument("--json", help="write rows, totals and summary as JSON")
    p.add_argument("--wide", action="store_true",
                   help="every column (compute/memory time split, collectives and sizes); default fits 120 columns")


def _scaled(row, key, scale):
    v = row[key]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v) * scale if v else "-"
    return v or "-"


def say(text: str) -> None:
    """Print prose wrapped to 120 columns (a leading newline kept)."""
    lead = "\n" if text.startswith("\n") else ""
    print(lead + textwrap.fill(text.lstrip("\n"), width=WIDTH, subsequent_indent="  "))


def run(args) -> int:
    s = load_scenario(args.scenario, args.overrides)
    result = estimate(s)
    m, par = s.model, s.parallel
    print(f"model {m.name}: b={s.training.micro_batch_size} s={m.seq_length} h={m.hidden_size} "
          f"a={m.num_attention_heads} f={m.ffn} layers={m.num_layers} vocab={m.vocab_size} "
          f"precision={s.training.precision}" + ("" if m.arch == "cnn" else f" attention={s.training.attention}")
          + documents_clause(s) + lora_clause(s))
    print(f"parallel: tensor {par.tensor} ({par.tensor_mode}{', sequence parallel' if par.sequence_parallel else ''})"
          + (f", context {par.context} ({par.context_mode}, {par.context_layout})" if par.context > 1 else "")
          + f", pipeline {par.pipeline}, data {par.data}; system {s.system.name} ({s.system.gpu.name})\n")
    shown = SHOWN if args.wide else [c for c in SHOWN if c[0] in NARROW]
    rows = [[_scaled(r, k, sc) for k, _, sc in shown] for r in result["rows"]]
    print(format_table(rows, [h for _, h, _ in shown]))
    if not args.wide:
        print("(--wide adds the compute/memory time split, the collectives and their sizes)")
    pl, tot = result["per_layer"], result["layers_total"]
    mean = " (mean of the hybrid pattern's layers)" if m.hybrid_layer_pattern else ""
    say(f"\nper layer{mean}: fwd {pl['flops_fwd'] / 1e12:.4g} TFLOP, bwd {pl['flops_bwd'] / 1e12:.4g} TFLOP, "
          f"fwd {pl['t_fwd_s'] * 1e3:.4g} ms (comm {pl['t_comm_fwd_s'] * 1e3:.4g}), "
          f"bwd {pl['t_bwd_s'] * 1e3:.4g} ms (comm {pl['t_comm_bwd_s'] * 1e3:.4g})")
    say(f"x {result['depth']} layers: fwd {tot['flops_fwd'] / 1e12:.4g} TFLOP, bwd {tot['flops_bwd'] / 1e12:.4g} "
          f"TFLOP, activations {tot['saved_bytes'] / 2**30:.4g} GiB, weights {tot['weight_bytes'] / 2**30:.4g} GiB, "
          f"fwd {tot['t_fwd_s'] * 1e3:.4g} ms, bwd {tot['t_bwd_s'] * 1e3:.4g} ms")
    sm = result["summary"]
    mem = sm["memory_per_gpu"]
    ref = f" (published {sm['reference_params'] / 1e9:.4g} B)" if sm["reference_params"] else ""
    say(f"\nparameters {sm['params'] / 1e9:.4g} B{ref}; FLOPs per iteration {sm['iteration_flops']:.4g} "
          f"({sm['microbatches']} micro-batches x data {par.data}); GPUs {sm['num_gpus']}")
    say(f"memory per GPU (largest stage): weights {mem['weights_bytes'] / 2**30:.3f} GiB, grads "
          f"{mem['grads_bytes'] / 2**30:.3f} GiB, optimizer {mem['optimizer_bytes'] / 2**30:.3f} GiB, "
          f"activations {mem['activations_per_microbatch_bytes'] / 2**30:.3f} GiB per micro-batch "
          f"(recompute {sm['recompute']}), up to {mem['workspace_bytes'] / 2**30:.3f} GiB more while a pass runs "
          f"(the loss's logit copies, FSDP2's root unit: costs/workspace.py)")
    say(f"time in communication: fwd {sm['frac_comm_fwd']:.1%}, bwd {sm['frac_comm_bwd']:.1%}")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(result["rows"])
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0
