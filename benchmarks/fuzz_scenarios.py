"""Mutation fuzzer over the bundled scenarios: `python benchmarks/fuzz_scenarios.py [--cases N]
[--seed S] [--jobs J] [--timeout T] [--show K] [--command COMMAND]`

Every bundled scenario (scenarios/**/*.yaml that loads as a scenario) is copied into a scratch
tree (so relative preset files and schedule CSVs still resolve), then mutated N times in all: a
value replaced by a hostile one (wrong types, {} / [] for a preset, floats where integers go,
1e30, 1e-9, NaN, huge integers), a key deleted or invented, a whole section replaced, a hostile
`--set` override, a valid but far-off number (a number of the file scaled by 1e-3 .. 1e3, or a
preset's hardware figure set to an extreme: a 10 GB/s HBM, a 1000 us launch), or a text-level
mutation (truncation, deep nesting, an anchor bomb, a 5,000-digit integer, stray bytes). Each
mutant runs `pipesim simulate FILE --no-files` (one in five also with `--json`) in-process inside a
worker process with an address-space limit and a timeout; `--command` runs the mutants through
estimate, search (a small one on 8 GPUs), sweep (a one-row grid) or partition instead (their
"nothing fits" answer, exit 1, counts as accepted).

Prints the counts:
  clean      exit 2 with one line naming a key path (model.x, training.y ...) or a line/column
  unnamed    exit 2 with one line that names neither (counted as a defect)
  accepted   exit 0 (the mutant was still a valid scenario)
  traceback  an exception escaped the CLI (a defect)
  hang       the case used more than --timeout CPU seconds, or 10x that in wall time (a defect)
and the first --show examples of each defect.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing as mp
import os
import random
import re
import shutil
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WALL_FACTOR = 10                 # a case is also a hang after this many times --timeout of wall time
MEMORY_LIMIT = 3 * 2**30         # a worker that tries to allocate more gets MemoryError (a traceback)

HOSTILE = [{}, [], None, True, False, "", "abc", "80GB", 0, -1, 1.5, 0.5, 1e30, -1e30, 1e-9, 2**64, 100000,
           float("nan"), float("inf"), [1, 2], {"a": 1}, {"preset": {}}, {"preset": []}, "1e-9", 10**40]
SET_VALUES = ["1e-9", "1e30", "1.0e+30", "{}", "[]", "x", "", "-3", "0", "100000", "2.5", ".nan", "[4, 4]",
              "{preset: {}}", "9" * 5000, "null", "true"]
KNOWN_SECTIONS = ("model", "system", "parallel", "training", "costs")
# valid but far-off numbers: a number of the file scaled, or a preset's hardware figure set, to
# reach the cost model's corners (a GEMM curve on a slow memory, a link 1000x slower ...)
SCALES = [1e-3, 0.01, 0.1, 0.5, 2, 10, 100, 1000]
HARDWARE = {"system.gpu.hbm_bandwidth_GBps": [10, 100, 1000, 100000], "system.gpu.memory_efficiency": [0.01, 0.1],
            "system.gpu.peak_tflops_bf16": [1, 10, 100000], "system.gpu.peak_tflops_fp16": [1, 100000],
            "system.gpu.kernel_launch_us": [0, 1000], "system.gpu.memory_GiB": [1, 10000],
            "system.intra_node.bandwidth_GBps": [0.1, 10, 100000], "system.inter_node.bandwidth_GBps": [0.01, 1, 10000],
            "system.inter_node.latency_us": [0, 10000], "system.gpu.sustained_ratio": [0.01, 1.0],
            "training.norm_sm_margin": [0, 8, 131, 100000], "training.gemm_sm_margin": [0, 16, 131, 100000],
            "training.tp_overlap": ["userbuffers", "decomposed"], "training.overlap_tp_comm": ["true"],
            "training.tp_overlap_cfg": ["{all: {num_sm: 131}}", "{proj_fprop: {num_sm: 1, num_splits: 1000}}",
                                        "{all: {set_sm_margin: false}, qkv_fprop: {aggregate: true}}"],
            "training.attention_kernel": ["fa1", "fa-triton", "xformers", "fa3", "sdpa-cudnn", "cudnn-9.13",
                                          "cudnn-9.17", "cudnn-2024"],
            "training.software_date": ["2025-10", "1999-01", "2025-13", "soon", "2026-04-31"],
            "training.master_weights": ["remainders"]}
NO_FILES = ["--no-files"]
# "FILE: section.key...: what" or "FILE: unknown: unknown section", a line number, or the --set key
# (a command-line option the message names counts too: `partition`'s "pick ... fewer --stages")
NAMED = re.compile(r": (model|system|parallel|training|costs|run)\b.*?: |memory_GiB is |: \S.*?: unknown section"
                   r"|line \d+|--set \S+: |--[a-z][a-z-]+\b")


def seeds() -> list[Path]:
    """Bundled files that load as scenarios (the mutation targets)."""
    from pipesim import load_scenario
    from pipesim.errors import PipesimError
    out = []
    for p in sorted(ROOT.glob("scenarios/**/*.yaml")):
        try:
            load_scenario(p)
        except PipesimError:
            continue
        out.append(p.relative_to(ROOT))
    return out


def paths_in(tree, prefix=()):
    """Every key path of nested mappings (and list items)."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield prefix + (k,)
            yield from paths_in(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree[:4]):
            yield prefix + (i,)
            yield from paths_in(v, prefix + (i,))


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def set_path(tree, path, value, delete=False):
    node = tree
    for k in path[:-1]:
        node = node[k]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value


def text_mutation(rng: random.Random, text: str) -> tuple[str, str]:
    """(name, mutated text)."""
    kind = rng.randrange(7)
    if kind == 0:
        return "truncated", text[: rng.randrange(len(text) + 1)]
    if kind == 1:
        depth = rng.choice([50, 500, 5000])
        return f"{depth} nested brackets", text + f"\nextra: {'[' * depth}{']' * depth}\n"
    if kind == 2:        # "billion laughs": anchors referring to anchors
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        for i in range(1, 9):
            lines.append(f"a{i}: &a{i} [{', '.join(['*a%d' % (i - 1)] * 10)}]")
        return "anchor bomb", text + "\n" + "\n".join(lines) + "\nmodel: {preset: *a8}\n"
    if kind == 3:
        return "5000-digit integer", re.sub(r"(:\s*)(\d+)\b", lambda m: m.group(1) + "9" * 5000, text, count=1)
    if kind == 4:
        i = rng.randrange(len(text) + 1)
        junk = rng.choice(["\t", ":", "- ", "{", "]", "&x", "*y", "!!python/object:os.system", "\x00",
                           "? ", "%YAML 9.9\n", "'", '"'])
        return f"inserted {junk!r}", text[:i] + junk + text[i:]
    if kind == 5:
        return "duplicated", text + "\n" + text
    return "indented", text.replace("\n", "\n" + " " * rng.randrange(1, 4), 1)


# how each command runs a mutant (a small, fast instance of it): `search` on 8 GPUs with the
# closed-form engine and one finalist, `sweep` over a one-row grid
COMMANDS = {
    "simulate": lambda f, grid: ["simulate", f] + NO_FILES,
    "estimate": lambda f, grid: ["estimate", f, "--wide"],
    "search": lambda f, grid: ["search", f, "--gpus", "8", "--pipeline", "1", "--micro-batch", "1", "--finalists",
                               "1", "--engine", "analytic", "--jobs", "1", "--no-progress"] + NO_FILES,
    "sweep": lambda f, grid: ["sweep", f, "--grid", grid, "--engine", "analytic", "--jobs", "1", "--no-progress"]
                             + NO_FILES,
    "partition": lambda f, grid: ["partition", f, "--stages", "2"],
}
# a search or sweep that finds nothing feasible says so on stdout and exits 1: an answer, not a defect
NOTHING_FITS = ("no layout fits", "no layout is possible", "no layout to try", "no feasible configuration")


def make_cases(n: int, rng: random.Random, scratch: Path, files: list[Path], command: str = "simulate"):
    """(description, argv) pairs; mutant files are written under scratch/ beside their original."""
    grid = scratch / "_fuzz_grid.yaml"
    grid.write_text("training.micro_batch_size: [1]\n")
    cases = []
    for i in range(n):
        src = files[i % len(files)]
        text = (scratch / src).read_text()
        raw = yaml.safe_load(text)
        op = rng.randrange(10)
        extra = []
        if op <= 3:                         # replace a value
            path = rng.choice(list(paths_in(raw)))
            value = rng.choice(HOSTILE)
            set_path(raw, path, value)
            desc = f"{'.'.join(map(str, path))} = {str(value)[:40]}"
        elif op == 4:
            path = rng.choice(list(paths_in(raw)))
            set_path(raw, path, None, delete=True)
            desc = f"delete {'.'.join(map(str, path))}"
        elif op == 5:
            path = rng.choice([p for p in paths_in(raw) if isinstance(p[-1], str)] or [("model",)])
            set_path(raw, path[:-1] + ("bogus_key",), 1)
            desc = f"add {'.'.join(map(str, path[:-1] + ('bogus_key',)))}"
        elif op == 6:
            section = rng.choice(KNOWN_SECTIONS)
            raw[section] = rng.choice(HOSTILE)
            desc = f"{section} = {str(raw[section])[:40]}"
        elif op == 7:
            path = rng.choice([p for p in paths_in(raw) if isinstance(p[-1], str)] or [("model",)])
            value = rng.choice(SET_VALUES)
            extra = ["--set", f"{'.'.join(map(str, path))}={value}"]
            desc = f"--set {'.'.join(map(str, path))}={value[:30]}"
        elif op == 8:
            numbers = [p for p in paths_in(raw) if _is_number(_get(raw, p))]
            if numbers and rng.randrange(2):
                path = rng.choice(numbers)
                old, factor = _get(raw, path), rng.choice(SCALES)
                value = max(1, round(old * factor)) if isinstance(old, int) else old * factor
                set_path(raw, path, value)
                desc = f"{'.'.join(map(str, path))} x {factor:g} = {value}"
            else:
                key = rng.choice(sorted(HARDWARE))
                value = rng.choice(HARDWARE[key])
                extra = ["--set", f"{key}={value}"]
                desc = f"--set {key}={value}"
        if op <= 8:
            try:
                text = yaml.safe_dump(raw, sort_keys=False)
            except (yaml.YAMLError, RecursionError, ValueError):
                text = str(raw)
        else:
            desc, text = text_mutation(rng, text)
        dst = scratch / src.parent / f"_fuzz{i}.yaml"
        dst.write_text(text)
        argv = COMMANDS[command](str(dst), str(grid)) + extra
        if command == "simulate" and rng.randrange(5) == 0:
            argv += ["--json", str(scratch / f"_fuzz{i}.json")]
        cases.append((f"{src}: {desc}", argv))
    return cases


def run_one(argv) -> tuple[str, str]:
    """(outcome, detail) of one CLI call in this process."""
    from pipesim.cli import main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except BaseException as exc:        # noqa: BLE001 - anything escaping main is what we count
        import traceback
        return "traceback", "".join(traceback.format_exception_only(type(exc), exc)).strip()[:300]
    text = err.getvalue().strip()
    last = (out.getvalue().strip().splitlines() or [""])[-1]
    if rc == 0 or (rc == 1 and last.startswith(NOTHING_FITS)):
        return "accepted", ""
    lines = text.splitlines()
    if rc == 2 and len(lines) == 1:
        return ("clean" if NAMED.search(lines[0]) else "unnamed"), lines[0][:300]
    return "traceback", f"exit {rc}: {text[:300]}"


def worker(conn) -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    import pipesim.cli  # noqa: F401 - import once, before the first case
    while True:
        item = conn.recv()
        if item is None:
            return
        conn.send(run_one(item))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc): on a shared machine wall time
    says little, so a hang is a case that keeps a CPU busy."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def run_pool(cases, jobs: int, timeout: float):
    ctx = mp.get_context("fork")
    results: list = [None] * len(cases)
    todo = list(range(len(cases)))[::-1]
    slots = []                      # [process, conn, case index or None, started, CPU s at start]

    def spawn():
        parent, child = ctx.Pipe()
        p = ctx.Process(target=worker, args=(child,), daemon=True)
        p.start()
        return [p, parent, None, 0.0, 0.0]

    slots = [spawn() for _ in range(jobs)]
    while todo or any(s[2] is not None for s in slots):
        for s in slots:
            if s[2] is None and todo:
                s[2], s[3], s[4] = todo.pop(), time.monotonic(), cpu_seconds(s[0].pid)
                s[1].send(cases[s[2]][1])
        busy = [s for s in slots if s[2] is not None]
        ready = wait([s[1] for s in busy], timeout=0.2)
        for s in busy:
            if s[1] in ready:
                try:
                    results[s[2]] = s[1].recv()
                except EOFError:            # the worker died (e.g. killed by the OS)
                    results[s[2]] = ("traceback", "worker process died")
                    s[0].join()
                    s[:] = spawn()
                    continue
                s[2] = None
            elif (cpu_seconds(s[0].pid) - s[4] > timeout
                  or time.monotonic() - s[3] > WALL_FACTOR * timeout):
                results[s[2]] = ("hang", f"> {timeout:.0f} CPU s")
                s[0].kill()
                s[0].join()
                s[:] = spawn()
    for s in slots:
        s[1].send(None)
        s[0].join(timeout=5)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="CPU seconds before a case counts as a hang (or 10x that in wall time)")
    ap.add_argument("--show", type=int, default=5, help="examples printed per defect kind")
    ap.add_argument("--command", choices=sorted(COMMANDS), default="simulate",
                    help="the command each mutant is run through (default simulate)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    files = seeds()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pipesim-fuzz-") as tmp:
        scratch = Path(tmp)
        shutil.copytree(ROOT / "scenarios", scratch / "scenarios")
        shutil.copytree(ROOT / "traces", scratch / "traces")
        cases = make_cases(args.cases, rng, scratch, files, args.command)
        results = run_pool(cases, args.jobs, args.timeout)
    counts: dict = {}
    examples: dict = {}
    for (desc, _), (outcome, detail) in zip(cases, results):
        counts[outcome] = counts.get(outcome, 0) + 1
        examples.setdefault(outcome, []).append(f"{desc}\n      -> {detail}")
    print(f"{len(cases)} mutants of {len(files)} bundled scenarios through `pipesim {args.command}`, seed {args.seed}, "
          f"{args.jobs} workers, "
          f"{time.perf_counter() - t0:.0f} s")
    for k in ("clean", "accepted", "unnamed", "traceback", "hang"):
        print(f"  {k:10s} {counts.get(k, 0):5d}")
    for k in ("unnamed", "traceback", "hang"):
        for line in examples.get(k, [])[: args.show]:
            print(f"  [{k}] {line}")
    return 0 if not any(counts.get(k) for k in ("unnamed", "traceback", "hang")) else 1


if __name__ == "__main__":
    sys.exit(main())
