"""Sweeps and searches on Ray: configuration groups as Ray tasks (`pipesim sweep/search --ray`).

Ray is optional (`pip install pipesim[cluster]`) and imported only here. `address` is passed to
`ray.init`: None starts a local instance (or joins the one RAY_ADDRESS names), "auto" joins the
cluster this machine is part of (`ray start --head` / `ray start --address=HEAD:6379` on the
nodes), "ray://HEAD:10001" connects through Ray Client from outside the cluster. The nodes need
pipesim installed (the same version as the driver). Results come back as each task finishes, so
progress is reported as with the process pool; the driver keeps the row order.
"""
from __future__ import annotations

from typing import Callable

from pipesim.errors import PipesimError


def add_ray_argument(parser) -> None:
    """`--ray [ADDRESS]` of `pipesim sweep` and `pipesim search` (None: not on Ray; "": local)."""
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="run configurations as Ray tasks instead of local processes: no ADDRESS starts a "
                             "local Ray (or joins RAY_ADDRESS), 'auto' joins this machine's cluster, "
                             "ray://HEAD:10001 a remote one (needs pipesim[cluster])")


def connect(address: str | None) -> None:
    try:
        import ray
    except ImportError:
        raise PipesimError("--ray needs the ray package: pip install 'pipesim[cluster]'") from None
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, log_to_driver=False, **({} if address else {"include_dashboard": False}))
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise PipesimError(f"--ray {address or ''}: cannot start or reach Ray ({str(exc).splitlines()[0]})") from None


def run_ray(groups: list, task: Callable, args: tuple, address: str | None, arrived: Callable) -> None:
    """Run task(group, *args) -> list of rows for every group as Ray tasks; `arrived(rows)` is
    called in completion order."""
    import ray
    connect(address)
    remote = ray.remote(task)
    shared = [ray.put(a) for a in args]        # shipped once, not with every task
    pending = [remote.remote(g, *shared) for g in groups]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        arrived(ray.get(ready[0]))
