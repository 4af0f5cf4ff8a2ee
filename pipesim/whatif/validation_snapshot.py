"""`pipesim validate --snapshot`: every published case pipesim runs, with its class and throughput
error, written where reports read it (pipesim/report/accuracy.py)."""
from __future__ import annotations

import json
from pathlib import Path

from pipesim.report.accuracy import SNAPSHOT, class_of, size_of, stack_of


def snapshot_rows(results: dict, moe: list, longseq: list) -> list[dict]:
    """Rows {id, family, generation, kind, stack, error_pct, gpus, size, tensor, pipeline, seq} from the three
    validation runs: the families (throughput errors as they are), the MoE zoo (step-time errors,
    turned into throughput ones: 1 / (1 + e) - 1) and its long-sequence table (a row per routing)."""
    from pipesim.scenario.load import load_scenario
    from pipesim.whatif.validation import case_scenario
    from pipesim.whatif.validation_moe import load_moe_cases, moe_case_scenario
    rows = []

    def add(case_id: str, family: str, scenario: dict, error: float) -> None:
        s = load_scenario(scenario)
        cls = class_of(s)
        if cls is not None:
            rows.append({"id": case_id, "family": family, "generation": cls[0], "kind": cls[1],
                         "stack": stack_of(s),
                         "error_pct": round(error, 2), "gpus": s.num_gpus, "size": round(size_of(s), 6),
                         "tensor": s.parallel.tensor, "pipeline": s.parallel.pipeline, "seq": s.model.seq_length})

    for family, rs in results.items():
        for r in rs:
            if r.error_pct is not None:
                add(r.case.id, family, case_scenario(r.case), r.error_pct)
    zoo = {c["id"]: c for c in load_moe_cases()}
    for r in moe:
        if r.error_pct is not None:
            add(r.id, "moezoo-qwen3", moe_case_scenario(zoo[r.id]), 100.0 * (1.0 / (1.0 + r.error_pct / 100.0) - 1.0))
    for r in longseq:
        if r.error_pct is not None:
            add(f"{r.id}-{r.routing}", "moezoo-qwen3-longseq", moe_case_scenario(zoo[r.id], r.routing), r.error_pct)
    return rows


def run_all(jobs: int = 2, progress=None) -> list[dict]:
    """Run every validation case (the default simulator and kernel curves) into snapshot rows."""
    from pipesim.whatif.validation import run_suite
    from pipesim.whatif.validation_moe import run_longseq_suite, run_moe_suite
    results = run_suite(None, jobs=jobs, progress=progress)
    return snapshot_rows(results, run_moe_suite(), run_longseq_suite())


def write_snapshot(rows: list[dict], path: Path = SNAPSHOT) -> None:
    text = json.dumps({"about": "pipesim's throughput error on each published run it validates against "
                                "(+ = faster than measured), by class; written by `pipesim validate "
                                "--snapshot`, read by pipesim/report/accuracy.py",
                       "cases": rows}, indent=1)
    Path(path).write_text(text + "\n")
