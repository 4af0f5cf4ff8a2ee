"""`pipesim calibrate [--device cuda|cpu] [--scenario S [--grid]] [--quick] [--threads N] [--no-comm]
[--nproc N [--nice K]] --out traces/NAME.json`: measure op costs on this device into a cost profile
(format: pipesim.costs.profile; what and how: pipesim.calibrate.run). With --nproc, on CPU, inside N
emulator ranks with the host model (pipesim.emulator.rank_calibration, pipesim.calibrate.host)."""
from __future__ import annotations

import sys
import time


class ProgressBar:
    """A one-line progress bar on stderr (redrawn in place on a terminal, one line per step
    otherwise so logs stay readable)."""

    def __init__(self, stream=None, width: int = 28):
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()

    def __call__(self, done: int, total: int, label: str) -> None:
        frac = done / total if total else 1.0
        fill = int(round(frac * self.width))
        bar = "#" * fill + "." * (self.width - fill)
        line = f"[{bar}] {done:3d}/{total} {time.monotonic() - self.start:5.1f}s {label}"
        if self.tty:
            self.stream.write("\r" + line[:120].ljust(120) + ("\n" if done >= total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _check_writable(out: str) -> None:
    """Fail before measuring, not after, when the profile cannot be written."""
    import os
    from pathlib import Path

    from pipesim.errors import ProfileError
    parent = Path(out).resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfileError(f"{out}: cannot create the folder {parent}: {exc.strerror}") from None
    if not os.access(parent, os.W_OK) or Path(out).is_dir():
        raise ProfileError(f"{out}: cannot write the profile there")


def add_arguments(parser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="device to measure (default: cuda when available, else cpu)")
    parser.add_argument("--scenario", default=None,
                        help="measure the op shapes this scenario needs (default: a standard grid)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="with --scenario: override one of its keys, e.g. --set model.seq_length=2048 (repeatable)")
    parser.add_argument("--grid", action="store_true",
                        help="with --scenario: also measure the default grid of shapes")
    parser.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for torch (default 1, as the emulator uses per rank)")
    parser.add_argument("--no-comm", action="store_true",
                        help="skip the two-process send/recv and all-reduce measurements")
    parser.add_argument("--nproc", type=int, default=None,
                        help="--device cpu with --scenario: calibrate inside N emulator ranks (the "
                             "scenario's process/thread layout, pinned, prioritised), with the host model")
    parser.add_argument("--nice", type=int, default=20, help="with --nproc: raise the ranks' priority (root)")
    parser.add_argument("--out", required=True, help="profile JSON to write, e.g. traces/cpu.json")


def run(args) -> int:
    from pipesim.calibrate.run import calibrate
    from pipesim.errors import ProfileError

    if args.threads < 1:
        raise ProfileError(f"--threads must be >= 1, got {args.threads}")
    _check_writable(args.out)
    device = args.device
    if device is None:
        try:
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            device = "cpu"
    if args.overrides and not args.scenario:
        raise ProfileError(f"--set {args.overrides[0]}: needs --scenario (the standard grid reads no scenario)")
    if args.nproc is not None:
        return _run_in_ranks(args, device)
    scenario = None
    if args.scenario:
        try:
            from pipesim import load_scenario
        except ImportError:
            raise ProfileError("--scenario needs pipesim.load_scenario, which this build lacks") from None
        scenario = load_scenario(args.scenario, args.overrides)
    profile = calibrate(device, scenario=scenario, quick=args.quick, threads=args.threads,
                        comm=not args.no_comm, progress=ProgressBar(), grid=args.grid)
    try:
        profile.save(args.out)
    except OSError as exc:
        raise ProfileError(f"{args.out}: cannot write the profile: {exc.strerror}") from None
    for note in profile.device.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {args.out}: {len(profile.measurements)} measurements on {profile.device['name']} "
          f"({device}, {args.threads} thread(s))")
    for kind, unit, scale in (("matmul", "TFLOP/s", 1e12), ("memory", "GB/s", 1e9),
                              ("p2p", "GB/s", 1e9), ("allreduce", "GB/s (bus)", 1e9)):
        value = profile.achieved(kind)
        if value is not None:
            print(f"  achieved {kind:9s} {value / scale:10.3f} {unit}")
    return 0


def _run_in_ranks(args, device: str) -> int:
    """The op costs and the host model measured inside the emulator's ranks (rank_calibration)."""
    import json

    from pipesim.errors import ProfileError
    if device != "cpu" or not args.scenario:
        raise ProfileError("--nproc calibrates inside emulator ranks: it needs --device cpu and --scenario")
    from pipesim.emulator import emulate
    from pipesim.emulator.rank_calibration import DEFAULT_BUDGET_S
    budget = DEFAULT_BUDGET_S / (2 if args.quick else 1)
    res = emulate(args.scenario, overrides=args.overrides, nproc=args.nproc, steps=0, warmup=0, threads=args.threads,
                  nice=args.nice, pin=True, calibrate={"budget_s": budget})
    profile = res.get("profile")
    if profile is None:
        raise ProfileError(f"the ranks wrote no calibration (see {res.get('run_dir')})")
    try:
        with open(args.out, "w") as fh:
            json.dump(profile, fh, indent=1)
    except OSError as exc:
        raise ProfileError(f"{args.out}: cannot write the profile: {exc.strerror}") from None
    host = profile["device"]["host"]
    lay = host["layout"]
    print(f"wrote {args.out}: {len(profile['measurements'])} measurements inside {lay['ranks']} ranks on "
          f"{lay['cores']} cores ({lay['threads_per_rank']} thread(s) each)")
    print(f"  host: {host['kernel_launch_s'] * 1e6:.1f} us per launch, {host['action_s'] * 1e6:.1f} us per "
          f"action" + (f", p2p {host['p2p']['latency_s'] * 1e6:.0f} us + {host['p2p']['bandwidth_Bps'] / 1e9:.2f} GB/s"
                       if "p2p" in host else ""))
    return 0
