"""Evaluate prepared variants (in a process pool) into flat result rows.

A row: the swept keys, derived layout columns, `status` (ok | oom | pruned | error), `reason`,
and every scalar metric of the simulator report (nested dicts of scalars flattened with dots).
The evaluator is injectable (`evaluator=`, a picklable top-level callable scenario -> report
dict), so the sweep machinery is testable without the simulator.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from typing import Callable, Iterable

from pipesim.errors import OutOfMemoryError, PipesimError
from pipesim.whatif.grid import Prepared, short_reason

STATUS_OK, STATUS_OOM, STATUS_PRUNED, STATUS_ERROR = "ok", "oom", "pruned", "error"
SKIP_KEYS = {"events", "memory", "ranks", "stage_costs", "stages", "schedule_grid"}


def simulate_report(scenario, mode: str = "representative", detail: bool = False) -> dict:
    """Default evaluator: the simulator, metrics only (no trace events; no per-rank communication
    union or per-stage cost dicts, which no row holds: see simulate's `detail`). Its `engine`
    column says which timing ran: "dag" (exact longest path, sim/dag.py) or "simpy" (the event engine)."""
    from pipesim.sim import simulate
    return simulate(scenario, mode=mode, trace=False, detail=detail).to_dict(include_trace=False)


def detailed_report(scenario, mode: str = "representative") -> dict:
    """simulate_report with the per-stage costs and per-rank communication (validation's error budget)."""
    return simulate_report(scenario, mode, detail=True)


def layout_columns(s) -> dict:
    """Columns every row carries, whatever the grid varied (the resolved layout)."""
    p, t = s.parallel, s.training
    return {"tensor": p.tensor, "context": p.context,
            "context_mode": p.context_mode if p.context > 1 else "-", "pipeline": p.pipeline, "data": p.data,
            "expert": p.expert, "precision": t.precision,
            "virtual_stages": p.virtual_stages,
            "micro_batch_size": t.micro_batch_size, "num_microbatches": s.num_microbatches,
            "schedule": t.schedule, "recompute": t.recompute, "zero_stage": t.zero_stage,
            "compression_bits": t.activation_compression_bits, "offload_layers": t.offload_activation_layers,
            "rank_order": p.rank_order, "num_gpus": s.num_gpus}


def flatten(report: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in report.items():
        if key in SKIP_KEYS:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, bool) or isinstance(value, (int, float, str)) or value is None:
            out[name] = value
        elif isinstance(value, dict) and not prefix:
            out.update(flatten(value, prefix=f"{name}."))
    return out


# Memory screening: a layout whose closed-form peak exceeds the GPU memory by this factor is
# out of memory whatever the event order; it is kept as an infeasible row (peak and timing from
# the closed form, engine "analytic") without running the simulator. The closed form and the
# simulator share the stage costs and agree on peaks within 2 % for the schedules below on every
# simulated row of the GPT-3 1024-GPU grid (docs/WHATIF.md); the V-shaped schedules' closed-form
# peak, counted chunk by chunk, agrees within 0.2 % (DualPipeV) and 4 % above (ZB-V) on the layouts
# tests/test_whatif_analytic.py checks, not yet on a whole grid, so those are always simulated.
OOM_MARGIN = 1.10
SCREENED_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")


def screened_oom(s) -> dict | None:
    from pipesim.whatif.analytic import analytic_report
    if s.training.schedule not in SCREENED_SCHEDULES:
        return None
    rep = analytic_report(s)
    if rep["peak_memory_bytes"] > OOM_MARGIN * s.system.gpu.memory:
        return rep
    return None


def evaluate_one(item: Prepared, evaluator: Callable, mode: str, screen: bool = False) -> dict:
    row = {"index": item.index, **item.values}
    if item.scenario is None and item.raw is not None:
        from pipesim.scenario.load import load_scenario
        try:
            item = Prepared(item.index, item.values, scenario=load_scenario(item.raw))
        except PipesimError as exc:
            item = Prepared(item.index, item.values, reason=short_reason(str(exc)))
    if item.scenario is None:
        return {**row, "status": STATUS_PRUNED, "reason": item.reason}
    row.update(layout_columns(item.scenario))
    try:
        report = screened_oom(item.scenario) if screen else None
        if report is None:
            report = evaluator(item.scenario, mode)
    except OutOfMemoryError as exc:
        return {**row, "status": STATUS_OOM, "reason": short_reason(str(exc))}
    except PipesimError as exc:       # e.g. a schedule that cannot run this layout (PlanError)
        return {**row, "status": STATUS_PRUNED, "reason": short_reason(str(exc))}
    metrics = flatten(report)
    metrics.pop("status", None)
    if metrics.get("oom"):
        peak = metrics.get("peak_memory_bytes")
        cap = item.scenario.system.gpu.memory
        reason = (f"peak {peak / 2**30:.1f} GiB > {cap / 2**30:.1f} GiB per GPU" if peak else "out of memory")
        return {**row, **metrics, "status": STATUS_OOM, "reason": reason}
    return {**row, **metrics, "status": STATUS_OK, "reason": ""}


# Worker state: set once per process by the pool initializer (avoids pickling it per task).
_WORKER: dict = {}


def _init_worker(evaluator, mode, screen=False):
    _WORKER["evaluator"], _WORKER["mode"], _WORKER["screen"] = evaluator, mode, screen


def _work(item: Prepared) -> dict:
    try:
        return evaluate_one(item, _WORKER["evaluator"], _WORKER["mode"], _WORKER["screen"])
    except Exception as exc:       # a bug in one config must not kill the sweep; keep it as a row
        return {"index": item.index, **item.values, "status": STATUS_ERROR,
                "reason": f"{type(exc).__name__}: {exc}".splitlines()[0]}


def _work_group(group: list[Prepared]) -> list[dict]:
    return [_work(it) for it in group]


def _ray_group(group: list[Prepared], evaluator, mode, screen) -> list[dict]:
    """A Ray task: one group of configurations (the worker process keeps its plan cache)."""
    _init_worker(evaluator, mode, screen)
    return _work_group(group)


def task_groups(todo: list[Prepared], jobs: int) -> list[list[Prepared]]:
    """Configurations that share a plan family (schedule, P, M, V) go to one worker as one task,
    so every distinct plan is generated once per sweep and reused from that worker's plan cache
    (sim/workload.py), instead of once per process that meets it. Items still to be loaded (search
    candidates) and CSV plans have no family: they go in chunks. Largest groups first."""
    from pipesim.sim.workload import plan_family
    families: dict = {}
    loose = []
    for it in todo:
        fam = plan_family(it.scenario) if it.scenario is not None else None
        if fam is None:
            loose.append(it)
        else:
            families.setdefault(fam, []).append(it)
    chunk = max(1, min(16, len(todo) // (max(jobs, 1) * 8)))
    groups = sorted(families.values(), key=len, reverse=True)
    groups += [loose[i:i + chunk] for i in range(0, len(loose), chunk)]
    return groups


def evaluate_all(items: list[Prepared], evaluator: Callable = simulate_report, mode: str = "representative",
                 jobs: int = 1, progress=None, screen: bool = False, ray_address: str | None = None,
                 use_ray: bool = False) -> list[dict]:
    """Rows in the order of `items`. Pruned items never reach a worker. `progress(done, total)` is
    called as rows arrive. jobs <= 0 means one per CPU. `screen`: rows that the closed form puts
    over OOM_MARGIN x the GPU memory skip the evaluator (see screened_oom). `use_ray`: run the
    groups as Ray tasks (ray.init(address=ray_address): None starts or joins a local instance,
    "auto" the cluster this machine belongs to, "ray://HOST:10001" a remote head) instead of a
    process pool; the rows are the same."""
    jobs = jobs if jobs and jobs > 0 else (os.cpu_count() or 1)
    rows: dict[int, dict] = {}
    todo = []
    for it in items:
        if it.scenario is None and it.raw is None:
            rows[it.index] = evaluate_one(it, evaluator, mode)
        else:
            todo.append(it)
    total, done = len(items), len(rows)
    if progress:
        progress(done, total)

    def arrived(batch):
        nonlocal done
        for row in batch:
            rows[row["index"]] = row
        done += len(batch)
        if progress:
            progress(done, total)

    groups = task_groups(todo, jobs)
    if use_ray:
        from pipesim.whatif.cluster import run_ray
        run_ray(groups, _ray_group, (evaluator, mode, screen), ray_address, arrived)
    elif jobs == 1 or len(todo) <= 1:
        _init_worker(evaluator, mode, screen)
        for group in groups:
            arrived(_work_group(group))
    else:
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        with ctx.Pool(jobs, initializer=_init_worker, initargs=(evaluator, mode, screen)) as pool:
            for batch in pool.imap_unordered(_work_group, groups):
                arrived(batch)
    return [rows[it.index] for it in items]


class ProgressBar:
    """A one-line progress bar on a text stream (stderr), redrawn at most every `interval` s."""

    def __init__(self, stream, label: str = "sweep", width: int = 30, interval: float = 0.1):
        self.stream, self.label, self.width, self.interval = stream, label, width, interval
        self.start = None
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        if done < total and now - self.last < self.interval:
            return
        self.last = now
        frac = done / total if total else 1.0
        fill = int(round(frac * self.width))
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{total} "
                          f"{rate:6.1f}/s eta {eta:5.1f}s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def count_status(rows: Iterable[dict]) -> dict[str, int]:
    out = {STATUS_OK: 0, STATUS_OOM: 0, STATUS_PRUNED: 0, STATUS_ERROR: 0}
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out
