"""One scenario on several system presets (`pipesim search --systems dgx-h100,gb200-nvl72=...`):
the question a planner asks before the layout, which hardware to rent.

The scenario's system section is retargeted to each preset: what describes the cluster rather
than its hardware (the network pods) is kept, every hardware key (GPU, links, node shape, power,
stragglers) is the preset's; the keys dropped are named so the user sees what did not carry over.
A price per GPU-hour may follow a preset's name (`gb200-nvl72=4.2`): it becomes that system's
`run.gpu_hour_usd`, so the comparison can rank by cost, the only fair currency between GPU types.
"""
from __future__ import annotations

import os

from pipesim.errors import ScenarioError
from pipesim.scenario.file_paths import PRESET_FILE

# System keys that describe the cluster's network layout, not its hardware: carried to every preset.
CLUSTER_KEYS = ("pod_gpus", "pod_oversubscription")
# Recomputed for each GPU count by search.system_for; not "dropped".
SIZE_KEYS = ("num_nodes",)


def parse_systems(text: str, flag: str = "--systems") -> dict[str, float | None]:
    """'dgx-h100=2.5,gb200-nvl72' -> {'dgx-h100': 2.5, 'gb200-nvl72': None}, presets checked; a
    .yaml item is a system preset file (kept by its absolute path)."""
    from pipesim.presets.systems import SYSTEMS
    out: dict[str, float | None] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, _, price = item.partition("=")
        name = name.strip()
        if name.endswith(PRESET_FILE):        # a system preset file, e.g. one `pipesim fit --out` wrote
            if not os.path.isfile(name):
                raise ScenarioError(f"{flag} {text}: system preset file not found: {name}")
            name = os.path.abspath(name)
        elif name not in SYSTEMS:
            raise ScenarioError(f"{flag} {text}: unknown system preset {name!r}; expected among "
                                f"{', '.join(SYSTEMS)}, or a system preset file (.yaml)")
        if name in out:
            raise ScenarioError(f"{flag} {text}: {name} is named twice")
        out[name] = _price(price, name, flag, text) if price.strip() else None
    if not out:
        raise ScenarioError(f"{flag} {text!r}: expected a comma-separated list of system presets")
    return out


def _price(text: str, name: str, flag: str, whole: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e6:
        raise ScenarioError(f"{flag} {whole}: {name}={text}: expected a positive price per GPU-hour")
    return value


def label(preset: str) -> str:
    """How a system is named in tables: a preset file by its file name."""
    return os.path.basename(preset) if preset.endswith(PRESET_FILE) else preset


def on_system(raw: dict, preset: str, price: float | None = None) -> tuple[dict, list[str]]:
    """(the scenario `raw` on system `preset`, the system keys it gave that are not carried over).
    A price sets run.gpu_hour_usd; it needs a run section with tokens (cost = GPU-hours x price)."""
    sec = raw.get("system")
    sec = {"preset": sec} if isinstance(sec, str) else dict(sec or {})
    kept = {k: sec[k] for k in CLUSTER_KEYS if k in sec}
    dropped = sorted(k for k in sec if k not in CLUSTER_KEYS and k not in SIZE_KEYS and k != "preset")
    out = dict(raw, system={"preset": preset, **kept})
    if price is not None:
        run = raw.get("run")
        if not isinstance(run, dict) or not run.get("tokens"):
            raise ScenarioError(f"--systems {label(preset)}={price:g}: a price needs the scenario's run section with "
                                f"run.tokens (the run's cost is its GPU-hours x the price)")
        out["run"] = dict(run, gpu_hour_usd=price)
    return out, dropped

