"""`pipesim` command line: dispatches to one module per subcommand (pipesim/commands/<name>.py)."""
from __future__ import annotations

import argparse
import importlib
import sys

from pipesim.errors import PipesimError

# name -> (module under pipesim.commands, one-line help)
COMMANDS = {
    "estimate": ("estimate", "per-layer analytic cost table of a scenario (flops, memory, time, comm)"),
    "simulate": ("simulate", "simulate one training step of a scenario (SimPy)"),
    "schedule": ("schedule", "generate, print and plot a pipeline schedule"),
    "calibrate": ("calibrate", "measure kernel/op costs on this device into a cost profile"),
    "emulate": ("emulate", "run the scenario's plan for real on torch.distributed processes"),
    "compare": ("compare", "compare a simulated and an emulated report"),
    "crosscheck": ("crosscheck", "calibrate, simulate, emulate and compare in one go"),
    "partition": ("partition", "partition a model into balanced pipeline stages"),
    "sweep": ("sweep", "evaluate a grid of scenario variants"),
    "search": ("search", "find the best parallel layout for a model on a cluster"),
    "validate": ("validate", "compare predictions with published measurements"),
    "fit": ("fit", "fit a few hardware efficiencies to step times measured on your own cluster"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipesim", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        try:
            mod = importlib.import_module(f"pipesim.commands.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"pipesim.commands.{module}":
                raise
            p.set_defaults(_missing=name)
            continue
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if getattr(args, "_missing", None):
        print(f"pipesim {args._missing}: this command is not available in this build", file=sys.stderr)
        return 2
    from pipesim.scenario.file_paths import from_working_dir
    for name in ("overrides", "set"):              # the commands' --set lists
        if isinstance(getattr(args, name, None), list):
            setattr(args, name, from_working_dir(getattr(args, name)))
    try:
        return int(args._run(args) or 0)
    except PipesimError as exc:
        print(f"pipesim {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:      # `pipesim ... | head`: the reader went away; not an error of ours
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:       # a file the command was told to read or write: one line, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"pipesim {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
