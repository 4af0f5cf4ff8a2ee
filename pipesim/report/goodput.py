"""The whole run: wall-clock time to train `run.tokens` through interruptions, restarts and
checkpoints (the `run` section, pipesim/scenario/run_config.py).

The job trains τ seconds, blocks C seconds to take a checkpoint, and repeats. Interruptions
strike as a Poisson process at rate λ (the per-GPU rate times the job's GPUs); each costs a
downtime D (`run.restart_min`) after which the job re-reads its last checkpoint (R, itself
interruptible) and redoes the work since. The expected wall time of one period of τ + C
(Bougeret, Casanova, Rabie, Robert, Vivien 2011, "Checkpointing strategies for parallel jobs",
SC'11, Proposition 1):

    E[T(τ)] = e^{λR} · (1/λ + D) · (e^{λ(τ + C)} − 1)

and the run is T_s / τ such periods, T_s = tokens / the simulated step's tokens per second. The
expected number of interruptions per period is λ·E[T] / (1 + λD). The τ that minimises
E[T(τ)] / τ (ibid., Theorem 1) is (1 + W₀(−e^{−λC−1})) / λ, W₀ Lambert's function; written as
τ* = y / λ with ln(1 − y) + y + λC = 0 it is solved below without W₀, and for λC ≪ 1 it is
Young's sqrt(2C/λ) (Young 1974, "A first order approximation to the optimum checkpoint
interval"). Checkpoints fall between steps: τ is rounded to whole steps.

The checkpoint holds the weights in their training dtype and the optimizer's states (fp32 master
weights and moments, pipesim/costs/memory.py), every node writing its share in parallel
(Megatron-Core dist_checkpointing's fully parallel save, torch.distributed.checkpoint). With
`run.async_checkpoint` the step blocks only while each GPU copies its share to host memory
(system.host_link_GBps) and the write runs behind the training; an interruption during the write
loses that checkpoint as well, on average the write time more work to redo (when the write is
short against τ), counted into R, and the next checkpoint waits for the write (τ ≥ write).

Energy: the nodes at their maximum input power (system.node_power_kW, the DGX user guides) for
the whole wall time, an upper bound on the IT load (no cooling: PUE 1).
"""
from __future__ import annotations

import math

from pipesim.scenario.units import DAY, HOUR

# the last checkpoint size computed, keyed by what it depends on: a sweep or search loads the same
# model for every layout, and counting its parameters is half the closed form's time per layout
_LAST_CHECKPOINT: list = [None, 0.0]


def checkpoint_bytes(s) -> float:
    """Bytes of one checkpoint of the whole model: weights in the training dtype plus the
    optimizer states (Muon's Adam-managed share counted at Muon's one state: a few % low)."""
    from pipesim.costs.memory import optimizer_bytes_per_param
    from pipesim.costs.summary import total_params
    tr = s.training
    key = (s.model, tr.precision, tr.optimizer, s.moment_bytes, s.master_bytes)
    if _LAST_CHECKPOINT[0] != key:
        weight = 4 if tr.precision in ("fp32", "tf32") else 2
        per_param = weight + optimizer_bytes_per_param(tr.optimizer, tr.precision, s.moment_bytes, s.master_bytes)
        _LAST_CHECKPOINT[:] = [key, total_params(s) * per_param]
    return _LAST_CHECKPOINT[1]


def optimal_interval(rate: float, block: float) -> float:
    """Seconds of training between checkpoints that minimise the expected wall time: y / rate
    with ln(1 − y) + y + rate·block = 0, y in (0, 1) (Bougeret et al. 2011, Theorem 1)."""
    x = rate * block
    if x <= 0:
        return math.inf
    if x > 30:     # interruptions far more often than a checkpoint takes: 1 - y = e^(-1-x+(1-y)), below float's step
        return (1 - math.exp(-1 - x)) / rate
    lo, hi = 0.0, 1.0
    y = min(math.sqrt(2 * x), 0.5)              # Young's first-order root
    for _ in range(200):
        g = math.log1p(-y) + y + x                # decreasing in y: g(0) = x > 0, g(1-) = -inf
        if g > 0:
            lo = y
        else:
            hi = y
        step = g / (y / (1 - y)) if y > 0 else math.inf   # Newton: g'(y) = -y / (1 - y)
        nxt = y + step
        y = nxt if lo < nxt < hi else (lo + hi) / 2
        if abs(step) < 1e-15 * y or hi - lo < 1e-16:
            break
    return y / rate


def period_wall(work: float, block: float, rate: float, restart: float, recovery: float) -> float:
    """Expected seconds to complete `work` + `block` through interruptions at `rate`
    (Bougeret et al. 2011, Proposition 1; exact limit without interruptions)."""
    if rate <= 0:
        return work + block
    try:
        return math.exp(rate * recovery) * (1 / rate + restart) * math.expm1(rate * (work + block))
    except OverflowError:          # a period that practically never completes
        return math.inf


def run_estimate(s, step_time: float, tokens_per_s: float) -> dict:
    """The run section of a report: wall time, goodput, interruptions and the checkpoint plan."""
    run, n = s.run, s.num_gpus
    nodes = math.ceil(n / s.system.gpus_per_node)
    compute = run.tokens / tokens_per_s
    rate = run.interruptions_per_1000_gpu_days / 1000 / DAY * n
    size = checkpoint_bytes(s)
    write = size / (nodes * run.checkpoint_write)
    read = size / (nodes * (run.checkpoint_read or run.checkpoint_write))
    host = s.system.host_link_GBps
    overlapped = run.async_checkpoint and host is not None
    block = size / n / (host * 1e9) if overlapped else write
    recovery = read + (write if overlapped else 0.0)
    floor = max(step_time, write if overlapped else 0.0)
    wanted = run.checkpoint_interval or optimal_interval(rate, block)
    if not math.isfinite(wanted):              # no interruptions: one checkpoint at the end
        wanted = compute
    steps = _whole_steps(wanted, floor, step_time, block, rate, run.restart, recovery,
                         free=run.checkpoint_interval is None)
    interval = steps * step_time
    periods = compute / interval
    wall = periods * period_wall(interval, block, rate, run.restart, recovery)
    if not math.isfinite(wall):
        return {"tokens": run.tokens, "compute_s": compute, "wall_s": None, "goodput": 0.0,
                "never_finishes": f"an interruption every {1 / rate:.3g} s against checkpoint periods of "
                                  f"{interval + block:.3g} s and recoveries of {recovery:.3g} s"}
    interruptions = rate * wall / (1 + rate * run.restart) if rate > 0 else 0.0
    blocked, down = periods * block, interruptions * run.restart
    return {
        "tokens": run.tokens, "compute_s": compute, "wall_s": wall, "wall_days": wall / DAY,
        "goodput": compute / wall, "gpu_hours": wall * n / HOUR,
        "cost_usd": wall * n / HOUR * run.gpu_hour_usd if run.gpu_hour_usd is not None else None,
        # the nodes at their maximum input power for the whole wall time: an upper bound
        "energy_MWh": nodes * s.system.node_power_kW * wall / HOUR / 1000 if s.system.node_power_kW else None,
        "interruptions": interruptions, "mtti_s": 1 / rate if rate > 0 else None,
        "checkpoint_bytes": size, "checkpoint_interval_s": interval, "checkpoint_interval_steps": steps,
        "checkpoint_block_s": block, "checkpoint_write_s": write, "checkpoint_read_s": read,
        "checkpoint_overlapped": overlapped, "restart_s": run.restart,
        # where the wall time goes: training, blocked on checkpoints, down, re-reading + redoing
        "time_s": {"training": compute, "checkpoints": blocked, "restarts": down,
                   "recovery_and_rework": max(0.0, wall - compute - blocked - down)},
    }


def _whole_steps(wanted: float, floor: float, step: float, block: float, rate: float, restart: float,
                 recovery: float, free: bool) -> int:
    """The interval in whole steps, at least `floor` seconds: the better of the two neighbours of
    the optimum (per unit of work), or the nearest to a given interval."""
    least = max(1, math.ceil(floor / step - 1e-9))
    if not free:
        return max(least, round(wanted / step))
    lo = max(least, math.floor(wanted / step))
    options = {lo, max(least, lo + 1)}
    return min(options, key=lambda k: period_wall(k * step, block, rate, restart, recovery) / k)


def run_rows(r: dict) -> list[tuple[str, str]]:
    """The run estimate as (label, text) rows for the CLI summary and report.html."""
    if r["wall_s"] is None:
        return [("run", f"{r['tokens']:.3g} tokens never finish: {r['never_finishes']}")]
    mtti = f"one every {r['mtti_s'] / HOUR:.1f} h" if r["mtti_s"] else "none expected"
    cost = f", ${r['cost_usd']:,.0f}" if r["cost_usd"] is not None else ""
    if r["energy_MWh"] is not None:
        cost += f", at most {r['energy_MWh']:,.0f} MWh (nodes at their maximum power)"
    lost = ", ".join(f"{k.replace('_', ' ')} {v / r['wall_s'] * 100:.1f} %" for k, v in r["time_s"].items()
                     if k != "training")
    how = (f"blocks {r['checkpoint_block_s']:.1f} s (async; written in {r['checkpoint_write_s'] / 60:.1f} min)"
           if r["checkpoint_overlapped"] else f"blocks {r['checkpoint_write_s'] / 60:.1f} min (written synchronously)")
    return [
        ("run", f"{r['tokens']:.3g} tokens in {r['wall_days']:.1f} days wall-clock ({r['compute_s'] / DAY:.1f} days "
                f"of steps), goodput {r['goodput'] * 100:.1f} %, {r['gpu_hours']:,.0f} GPU-hours{cost}"),
        ("interruptions", f"~{r['interruptions']:.0f} ({mtti}); time lost: {lost}"),
        ("checkpoint", f"{r['checkpoint_bytes'] / 1e12:.2f} TB every {r['checkpoint_interval_s'] / 60:.1f} min "
                       f"({r['checkpoint_interval_steps']:,} steps), {how}; restart {r['restart_s'] / 60:.0f} min "
                       f"+ read {r['checkpoint_read_s'] / 60:.1f} min"),
    ]
