"""Where DeepSeek sparse attention pays off: one layer's attention block (from the up-projections
to the output projection, forward + backward, one sequence) of DeepSeek-V3.2 in its MLA form and
its DSA form, by sequence length and tensor parallelism, on H100 (pipesim/costs/dsa.py).

    .venv/bin/python benchmarks/dsa_attention.py [--gpu dgx-h100|dgx-b200|...]

Columns: the dense MLA block, the DSA block and its parts (indexer = projections + scores +
top-k; sparse = the sparse attention kernel; loss = the KL target and the indexer's gradients),
and MLA / DSA. Figures are predictions of the analytic cost model, not measurements.
"""
from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from pipesim import load_scenario
from pipesim.costs.layers import layer_ops
from pipesim.costs.stage import cost_model_for

BLOCK = ("q_absorb", "dsa_", "attention", "v_up", "kv_up", "mla_rope", "q_up", "proj")
PARTS = {"indexer": ("dsa_idx", "dsa_index_scores", "dsa_topk"), "sparse": ("attention",),
         "loss": ("dsa_loss_target", "dsa_indexer_grad")}


def seconds_by_op(system: str, variant: str, seq: int, tensor: int) -> dict:
    s = load_scenario({"model": {"preset": "deepseek-v3.2", "attention_variant": variant, "seq_length": seq,
                                 "num_layers": 4, "num_experts": 64, "moe_first_dense_layers": 1},
                       "system": {"preset": system, "num_nodes": 1},
                       "parallel": {"tensor": tensor, "sequence_parallel": tensor > 1},
                       "training": {"micro_batch_size": 1, "global_batch_size": 8}})
    cm = cost_model_for(s)
    return {o.name: cm.time(o, "fwd").seconds + cm.time(o, "bwd").seconds
            for o in layer_ops(s) if o.name.startswith(BLOCK)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="dgx-h100", help="system preset (default dgx-h100)")
    args = ap.parse_args()
    table = Table(title=f"DeepSeek-V3.2 attention block per layer and sequence, {args.gpu} (ms, fwd + bwd)")
    for col in ("seq", "TP", "MLA", "DSA", "indexer", "sparse", "loss", "MLA / DSA"):
        table.add_column(col, justify="right")
    for seq in (4096, 16384, 32768, 65536, 131072):
        for tensor in (1, 8):
            mla = sum(seconds_by_op(args.gpu, "mla", seq, tensor).values())
            ops = seconds_by_op(args.gpu, "dsa", seq, tensor)
            parts = {k: sum(v for n, v in ops.items() if n.startswith(pre)) for k, pre in PARTS.items()}
            dsa = sum(ops.values())
            table.add_row(str(seq), str(tensor), f"{mla * 1e3:.1f}", f"{dsa * 1e3:.1f}",
                          *(f"{parts[k] * 1e3:.1f}" for k in PARTS), f"{mla / dsa:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
