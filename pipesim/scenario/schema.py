"""Strict loading of nested dicts (from YAML) into frozen, typed dataclasses.

A dataclass field may carry metadata:
  key   - the name used in the file when it differs (units live in file key names: `memory_GiB`)
  scale - multiply the file value by this to get SI units inside (GiB -> bytes, us -> s)
  doc   - one line shown in error messages and docs
Unknown keys, wrong types and out-of-range values raise ScenarioError naming the source, the key
path and what was expected.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import reprlib
import types
import typing
from typing import Any, Literal, Union

from pipesim.errors import ScenarioError


def field(default=dataclasses.MISSING, *, key: str | None = None, scale: float = 1.0, doc: str = "",
          default_factory=dataclasses.MISSING):
    meta = {"key": key, "scale": scale, "doc": doc}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def file_key(f: dataclasses.Field) -> str:
    return f.metadata.get("key") or f.name


def file_keys(cls) -> list[str]:
    return [file_key(f) for f in dataclasses.fields(cls)]


@functools.lru_cache(maxsize=None)
def _fields_of(cls) -> tuple[dict, dict]:
    """(file key -> field, field name -> resolved type) of a dataclass: the annotations are
    strings (postponed evaluation), and resolving them per load cost most of a search's screen."""
    return {file_key(f): f for f in dataclasses.fields(cls)}, typing.get_type_hints(cls)


# No quantity in a scenario needs more than 2**53 (exact in a float); bigger integers are typos
# or attacks and would overflow numpy/index arithmetic further on.
MAX_INT = 2**53


class Loader:
    """Builds dataclasses from dicts; `source` names the file (or `--set`) in errors. `limits`
    maps a key path (`model.num_layers`) to the (low, high) range its value must lie in."""

    def __init__(self, source: str, limits: dict | None = None):
        self.source = source
        self.limits = limits or {}

    def fail(self, path: str, message: str) -> typing.NoReturn:
        raise ScenarioError(f"{self.source}: {path}: {message}")

    def build(self, cls, data: Any, path: str):
        if not isinstance(data, dict):
            self.fail(path, f"expected a mapping with keys {file_keys(cls)}, got {_describe(data)}")
        by_key, hints = _fields_of(cls)
        unknown = [k for k in data if k not in by_key]
        if unknown:
            self.fail(_join(path, _SHORT.repr(unknown[0]).strip("'")),
                      f"unknown key; valid keys here are: {', '.join(sorted(by_key))}")
        kwargs = {}
        for key, f in by_key.items():
            if key not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    self.fail(_join(path, key), f"missing required key ({f.metadata.get('doc') or hints[f.name]})")
                continue
            value = self.convert(hints[f.name], data[key], _join(path, key))
            self.check_limits(_join(path, key), value)
            scale = f.metadata.get("scale", 1.0)
            if scale != 1.0 and value is not None:
                value = ({k: float(v) * scale for k, v in value.items()} if isinstance(value, dict)
                         else float(value) * scale)
            kwargs[f.name] = value
        try:
            return cls(**kwargs)
        except ScenarioError:
            raise
        except (TypeError, ValueError) as exc:
            self.fail(path, str(exc))

    def check_limits(self, path: str, value) -> None:
        bounds = self.limits.get(path)
        if bounds is None or value is None:
            return
        lo, hi = bounds
        items = value if isinstance(value, tuple) else value.values() if isinstance(value, dict) else (value,)
        for v in items:
            if not lo <= v <= hi:
                self.fail(path, f"{v:g} is out of range: expected {lo:g} to {hi:g}")

    def convert(self, tp, value, path: str):
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (Union, types.UnionType):
            if value is None and type(None) in args:
                return None
            options = [a for a in args if a is not type(None)]
            errors = []
            for option in options:
                try:
                    return self.convert(option, value, path)
                except ScenarioError as exc:
                    errors.append(exc)
            if len(errors) == 1:
                raise errors[0]
            self.fail(path, f"expected one of {[_type_name(o) for o in options]}, got {_describe(value)}")
        if origin is Literal:
            if isinstance(value, (dict, list)) or value not in args:
                self.fail(path, f"expected one of {list(args)}, got {_SHORT.repr(value)}")
            return value
        if dataclasses.is_dataclass(tp):
            return self.build(tp, value, path)
        if origin in (dict,):
            kt, vt = args
            if not isinstance(value, dict):
                self.fail(path, f"expected a mapping, got {_describe(value)}")
            return {self.convert(kt, k, _join(path, str(k))): self.convert(vt, v, _join(path, str(k)))
                    for k, v in value.items()}
        if origin in (tuple, list):
            if not isinstance(value, (list, tuple)):
                self.fail(path, f"expected a list, got {_describe(value)}")
            item = args[0] if args else Any
            return tuple(self.convert(item, v, f"{path}[{i}]") for i, v in enumerate(value))
        if tp is bool:
            if not isinstance(value, bool):
                self.fail(path, f"expected true or false, got {_describe(value)}")
            return value
        if tp is int:
            if isinstance(value, bool) or not isinstance(value, int):
                if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INT:
                    return int(value)
                self.fail(path, f"expected an integer, got {_describe(value)}")
            if abs(value) > MAX_INT:
                self.fail(path, f"expected an integer of at most 2**53, got one with {len(str(abs(value)))} digits")
            return value
        if tp is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(path, f"expected a number, got {_describe(value)}"
                          + (" (units belong in the key name, not the value)" if isinstance(value, str) else ""))
            if not math.isfinite(value) or abs(value) > MAX_INT:
                self.fail(path, f"expected a finite number of at most 2**53, got {_describe(value)}")
            return float(value)
        if tp is str:
            if not isinstance(value, str):
                self.fail(path, f"expected a string, got {_describe(value)}")
            return value
        if tp is Any:
            return value
        raise TypeError(f"schema: unsupported type {tp!r} at {path}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_name(tp) -> str:
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxlevel = 40, 40, 4, 4, 2


def _describe(value) -> str:
    """Type and a bounded repr (a value may be a huge aliased structure)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        return f"an integer with {len(str(abs(value)))} digits"
    return f"{type(value).__name__} {_SHORT.repr(value)}"


def merge(base: dict, override: dict) -> dict:
    """Deep merge: keys of `override` replace or recurse into `base`."""
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out
