"""Sweeps and searches as Ray tasks give the same rows and rankings as the process pool (skipped
without ray; it is in the test extra). One local Ray instance (num_cpus=2) for the module."""
import pytest

ray = pytest.importorskip("ray")

from pipesim.whatif.evaluate import simulate_report, task_groups  # noqa: E402
from pipesim.whatif.search import SearchSpace, search  # noqa: E402
from pipesim.whatif.sweep import run_sweep  # noqa: E402
from pipesim.whatif.table import rank  # noqa: E402

BASE = {"model": {"preset": "gpt2-small"}, "system": {"preset": "dgx-a100-80gb"},
        "parallel": {"tensor": 1, "pipeline": 1, "data": 8},
        "training": {"micro_batch_size": 1, "global_batch_size": 32, "precision": "bf16"}}
GRID = {"grid": {"parallel.tensor": [1, 2], "parallel.pipeline": [1, 2, 4],
                 "zip": [{"training.schedule": "1f1b", "parallel.virtual_stages": 1},
                         {"training.schedule": "zb-v", "parallel.virtual_stages": 2}],
                 "training.recompute": ["none", "full"]}}


@pytest.fixture(scope="module")
def local_ray():
    # a loaded machine starts Ray's agents slowly: allow them three minutes to come up
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_agent_register_timeout_ms", "180000")
    mp.setenv("RAY_raylet_start_wait_time_s", "180")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    mp.undo()


def test_sweep_rows_identical_to_process_pool(local_ray):
    pool = run_sweep(BASE, GRID, evaluator=simulate_report, jobs=2)
    on_ray = run_sweep(BASE, GRID, evaluator=simulate_report, use_ray=True)
    assert any(r["status"] == "ok" for r in pool.rows)
    assert on_ray.rows == pool.rows
    assert [r["index"] for r in rank(on_ray.rows)] == [r["index"] for r in rank(pool.rows)]


def test_search_ranking_identical_to_process_pool(local_ray):
    base = {"model": {"preset": "gpt2-small"}, "system": {"preset": "dgx-a100-80gb"},
            "training": {"micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"}}
    space = SearchSpace(tensor=(1, 2), pipeline=(2, 4), micro_batch=(1, 2), zero=(0, 1), compression=(16,))
    a = search(base, 8, space, finalists=4, jobs=2)
    b = search(base, 8, space, finalists=4, use_ray=True)
    assert a.best is not None
    key = lambda res: [(r["tensor"], r["pipeline"], r["schedule"], r["micro_batch_size"], r["recompute"],
                        r["zero_stage"], r["throughput_samples_per_s"]) for r in res.finalists]
    assert key(a) == key(b)
    assert a.stages == b.stages


def test_plans_of_one_family_go_to_one_task():
    from pipesim.whatif.grid import prepare, read_grid
    items = [it for it in prepare(BASE, read_grid(GRID)) if it.scenario is not None]
    groups = task_groups(items, jobs=2)
    fam = lambda it: (it.scenario.training.schedule, it.scenario.parallel.pipeline, it.scenario.num_microbatches)
    seen = {}
    for k, g in enumerate(groups):
        for it in g:
            assert seen.setdefault(fam(it), k) == k
    assert sorted(it.index for g in groups for it in g) == sorted(it.index for it in items)
