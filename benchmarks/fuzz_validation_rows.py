"""Malformed published rows through the generic mapping: every shared and held-out training row,
renamed so that no family converter reads it, with one key or section replaced by an odd value;
each must load and convert, or fail in one line naming what is wrong - never a traceback.

Part 1 reads the rows in-process (load, convert, load the scenario); part 2 runs
`pipesim validate --cases` on files of such rows, where one bad row must not stop the others.

    python benchmarks/fuzz_validation_rows.py [--rows 1500] [--files 3] [--seed 5]
"""
from __future__ import annotations

import argparse
import copy
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from pipesim import load_scenario
from pipesim.errors import PipesimError
from pipesim.whatif.validation import DEFAULT_FILE, HELDOUT_FILE, case_scenario, load_cases

ODD = [None, -1, 0, "x", [], {}, 3.5, True, "n/a", "not stated", "2021-13-45", "arXiv:9913.12345", [1, 2],
       {"a": 1}, "MI300X", "FP8-DS"]
EXTRA_KEYS = ["lora", "activation_checkpointing", "float8", "cuda_graphs", "local_batch", "fsdp", "sequence_parallel",
              "head_dim", "num_shared_experts", "inter_node", "first_dense_layers", "mfu_pct", "gpu"]
SECTIONS = ["model", "parallel", "hardware", "training", "source", "measured", "settings"]


def rows() -> list[dict]:
    return [c for f in (DEFAULT_FILE, HELDOUT_FILE) for c in yaml.safe_load(f.read_text())
            if c.get("kind") == "training_throughput" and "scenario" not in c]


def mutated(rng: random.Random, base: list[dict], i: int) -> dict:
    c = copy.deepcopy(rng.choice(base))
    c["id"] = f"anon-{i}"
    sec = rng.choice(SECTIONS)
    if isinstance(c.get(sec), dict) and c[sec] and rng.random() > 0.15:
        c[sec][rng.choice(list(c[sec]) + EXTRA_KEYS)] = rng.choice(ODD)
    else:
        c[sec] = rng.choice(ODD)
    return c


def in_process(rng, base, n: int, tmp: Path) -> tuple[int, int]:
    """(rows that failed in one line, rows that raised anything else or a multi-line error)."""
    named = bad = 0
    path = tmp / "row.yaml"
    for i in range(n):
        path.write_text(yaml.safe_dump([mutated(rng, base, i)]))
        try:
            for case in load_cases(path):
                if case.load_error is None:
                    load_scenario(case_scenario(case))
        except PipesimError as exc:
            named += 1
            bad += "\n" in str(exc).strip()
        except Exception as exc:          # noqa: BLE001 - what this benchmark counts
            bad += 1
            print(f"  traceback: {type(exc).__name__}: {exc}"[:160])
    return named, bad


def through_cli(rng, base, files: int, tmp: Path) -> list[tuple[int, bool]]:
    """(exit code, traceback seen) of `pipesim validate --cases` per file of 80 mutated rows."""
    out = []
    for f in range(files):
        path = tmp / f"file{f}.yaml"
        path.write_text(yaml.safe_dump([mutated(rng, base, i) for i in range(80)]))
        r = subprocess.run([sys.executable, "-m", "pipesim", "validate", "--cases", str(path), "--jobs", "2"],
                           capture_output=True, text=True, timeout=1800)
        out.append((r.returncode, "Traceback" in r.stdout + r.stderr))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1500)
    ap.add_argument("--files", type=int, default=3)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    rng, base = random.Random(args.seed), rows()
    with tempfile.TemporaryDirectory() as t:
        named, bad = in_process(rng, base, args.rows, Path(t))
        print(f"in process: {args.rows} mutated rows, {named} failed in one line, {bad} tracebacks or "
              f"multi-line errors")
        cli = through_cli(rng, base, args.files, Path(t))
        print(f"pipesim validate --cases: {len(cli)} files of 80 rows, exit codes {[c for c, _ in cli]}, "
              f"tracebacks {sum(tb for _, tb in cli)}")


if __name__ == "__main__":
    main()
