"""Transformer Engine's Userbuffers overlap (training.tp_overlap: userbuffers) against the decomposed
model the validation families run, on the published NVIDIA runs that overlap TP communication.

    python benchmarks/tp_overlap.py

Every Megatron-Core r0.8 (BF16) and NeMo 24.07 (FP8) row with TP > 1, timed four ways:
  decomposed      each collective in tp chunks pipelined with its GEMM (the default, stage.exposed_tp)
  ub TE 2.x       Userbuffers with TE's defaults since 2.0 (16 SMs, margin on for pipeline and bulk)
  ub TE 1.x       TE's defaults before (16 SMs, no margin): what --tp-comm-overlap without a config ran in 2024
  ub NeMo H100    NeMo's tuned H100 configs (launcher 24.07 ub_cfg_h100_h12288_tp4_mbs1_seqlen2048.yaml:
                  pipeline 24 / 20 SMs with margin, bulk 2-8 SMs without, fc2_dgrad aggregated)
Prints each row's error against the published figure and each variant's MAPE and mean signed error.
"""
from __future__ import annotations

import dataclasses

from pipesim.whatif.evaluate import simulate_report
from pipesim.whatif.validation import mape, mean_signed, run_suite
from pipesim.scenario.tp_overlap_config import UbGemm

NEMO_H100 = {"qkv_dgrad": UbGemm(num_sm=4, set_sm_margin=False), "qkv_wgrad": UbGemm(num_sm=8, set_sm_margin=False),
             "fc1_dgrad": UbGemm(num_sm=2, set_sm_margin=False), "fc1_wgrad": UbGemm(num_sm=4, set_sm_margin=False),
             "proj_fprop": UbGemm(num_sm=24, set_sm_margin=True), "fc2_fprop": UbGemm(num_sm=20, set_sm_margin=True),
             "fc2_dgrad": UbGemm(aggregate=True)}
VARIANTS = {"decomposed": None, "ub TE 2.x": {}, "ub TE 1.x": {"all": UbGemm(set_sm_margin=False)},
            "ub NeMo H100": NEMO_H100}


def evaluator(cfg):
    def run(s, mode):
        if cfg is not None and s.training.overlap_tp_comm:
            s = dataclasses.replace(s, training=dataclasses.replace(s.training, tp_overlap="userbuffers",
                                                                    tp_overlap_cfg=cfg))
        return simulate_report(s, mode)
    return run


def main() -> None:
    table = {name: run_suite(["mcore-h100", "nemo2407"], evaluator=evaluator(cfg)) for name, cfg in VARIANTS.items()}
    print(f"{'case':34s}" + "".join(f"{name:>15s}" for name in VARIANTS))
    for suite in ("mcore-h100", "nemo2407"):
        rows = list(zip(*(table[name][suite] for name in VARIANTS)))
        for row in rows:
            if row[0].layout[0] > 1:        # TP > 1: the rows whose TP communication overlaps
                print(f"{row[0].case.id:34s}" + "".join(f"{r.error_pct:+14.1f}%" for r in row))
        print(f"{suite + ' MAPE / signed (all rows)':34s}"
              + "".join(f"{mape(table[n][suite]):7.1f}/{mean_signed(table[n][suite]):+6.1f}%" for n in VARIANTS))


if __name__ == "__main__":
    main()
