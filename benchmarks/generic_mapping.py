"""How far the `other` family's defaults carry: every published training row of the shared file
(and, with --heldout, of pipesim's held-out file) renamed (`anon-` + id) so that no family converter
reads it, predicted through pipesim/whatif/validation_generic.py, and the error summarised per
original family. The held-out rows were transcribed in shapes of their own (per-rank batches,
`system` for the GPU, "n/a"): how many of them run at all measures how much a row must say.

    python benchmarks/generic_mapping.py [--jobs 2] [--heldout]
"""
from __future__ import annotations

import argparse
import copy
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

from pipesim.whatif.validation import DEFAULT_FILE, HELDOUT_FILE, OWN_SUITE_PREFIXES, SUITES, run_suite
from pipesim.whatif.validation_generic import measured_metric


def family_of(case_id: str) -> str:
    if case_id.startswith(OWN_SUITE_PREFIXES):
        return "moezoo-qwen3"
    if case_id.startswith("sc21-t2-ZeRO-3"):
        return "sc21-table2 ZeRO-3"
    if case_id.startswith("sc21-t2-PTD-P"):
        return "sc21-table2 PTD-P"
    return next((name for name, (prefix, _) in SUITES.items() if prefix and case_id.startswith(prefix)),
                case_id.split("-")[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--heldout", action="store_true", help="also the held-out file's rows")
    args = ap.parse_args()
    rows = []
    for path in (DEFAULT_FILE, HELDOUT_FILE) if args.heldout else (DEFAULT_FILE,):
        for c in yaml.safe_load(path.read_text()):
            if c.get("kind") == "training_throughput":
                c = copy.deepcopy(c)
                if "scenario" in c:       # the held-out file's are relative to the repository
                    c["scenario"] = str(Path(__file__).resolve().parents[1] / c["scenario"])
                rows.append(c)
    skipped = [c["id"] for c in rows if measured_metric(c.get("measured") or {}) is None]
    rows = [c for c in rows if c["id"] not in skipped]
    for c in rows:
        c["id"] = "anon-" + c["id"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "anon.yaml"
        path.write_text(yaml.safe_dump(rows, sort_keys=False))
        results = run_suite(["other"], path=path, jobs=args.jobs)["other"]
    by_family = defaultdict(list)
    for r in results:
        by_family[family_of(r.case.id[len("anon-"):])].append(r)
    print(f"{'family (as read by the other family)':36s} {'ran':>6s} {'MAPE %':>7s} {'bias %':>7s}  first error")
    for family, rs in by_family.items():
        errs = [r.error_pct for r in rs if r.error_pct is not None]
        mape = sum(map(abs, errs)) / len(errs) if errs else float("nan")
        bias = sum(errs) / len(errs) if errs else float("nan")
        note = next((r.note for r in rs if r.error_pct is None), "")
        print(f"{family:36s} {len(errs):>2d}/{len(rs):<3d} {mape:7.1f} {bias:+7.1f}  {note[:80]}")
    if skipped:
        print(f"not read (no measured figure the other family compares): {', '.join(skipped)}")


if __name__ == "__main__":
    main()
