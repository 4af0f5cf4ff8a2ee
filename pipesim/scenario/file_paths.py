"""The file paths a scenario holds, moved with it: a scenario names files relative to its own folder
(model and system preset files, `model.hf_config`, a `training.schedule` CSV, `costs.profile`);
a variant built from its mapping elsewhere (a sweep, a search, `partition --scenario-out`) must
still find them."""
from __future__ import annotations

import os
from pathlib import Path

PRESET_FILE = (".yaml", ".yml")
# the scenario keys whose value may name a file, and the endings that make it one (a model or
# system section given as a bare string is its preset)
PATH_KEYS = {"model.preset": PRESET_FILE, "system.preset": PRESET_FILE, "model.hf_config": ("",),
             "costs.profile": ("",), "training.schedule": (".csv",)}


def rebase(raw: dict, folder: Path, to: Path | None = None) -> dict:
    """`raw` with each relative file path (relative to `folder`) made absolute, or, with `to`,
    relative to the folder `to`."""
    def moved(value: str) -> str:
        if os.path.isabs(value):
            return value
        target = os.path.abspath(os.path.join(folder, value))
        return os.path.relpath(target, to) if to is not None else target

    out = dict(raw)
    for path, suffixes in PATH_KEYS.items():
        section, key = path.split(".")
        sec = out.get(section)
        if key == "preset" and isinstance(sec, str) and sec.endswith(suffixes):
            out[section] = moved(sec)
        elif isinstance(sec, dict) and isinstance(sec.get(key), str) and sec[key].endswith(suffixes):
            out[section] = dict(sec, **{key: moved(sec[key])})
    return out


def from_working_dir(overrides: list[str]) -> list[str]:
    """Command-line `--set KEY=PATH` overrides with a relative PATH that exists from the working
    directory, made absolute: a path typed on the command line means the shell's folder (inside a
    scenario file, a path is relative to the file; an override whose file is not found here keeps
    that meaning)."""
    out = []
    for text in overrides:
        key, sep, value = text.partition("=")
        suffixes = PATH_KEYS.get(key.strip())
        if (sep and suffixes and value.endswith(suffixes) and not os.path.isabs(value)
                and os.path.isfile(value)):
            text = f"{key}={os.path.abspath(value)}"
        out.append(text)
    return out
