"""`python -m pipesim.emulator SCENARIO [options]`: the same as `pipesim emulate`. Under torchrun
(RANK/WORLD_SIZE set) every process runs one rank and rank 0 writes the outputs;
`--worker CONFIG` is how the launcher starts its own processes."""
from __future__ import annotations

import json
import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        from pipesim.emulator.entry import worker_main
        with open(argv[1]) as fh:
            cfg = json.load(fh)
        return worker_main(cfg)
    import argparse
    from pipesim.commands.emulate import add_arguments, run
    from pipesim.errors import PipesimError
    parser = argparse.ArgumentParser(prog="python -m pipesim.emulator")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except PipesimError as exc:
        print(f"pipesim emulate: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
