"""YAML for user input: `yaml.safe_load` with YAML 1.2 numbers and hard limits, every failure a
ScenarioError with the line and column.

Why not plain `yaml.safe_load`:
- PyYAML implements YAML 1.1, where `1e-9` (no dot) is a string; YAML 1.2 (and every user) reads
  it as a number. The float resolver below is YAML 1.2's core-schema float pattern.
- A 5,000-digit integer raises a bare ValueError (Python's int-string limit) with no position;
  integers longer than MAX_DIGITS are refused at their mark.
- PyYAML reads `2025-11-04` as a date (YAML 1.1's timestamp) and raises a bare ValueError on
  `2026-04-31`; YAML 1.2's core schema has no timestamp type, so a date stays the string it is
  (`training.software_date` parses it and names the key when it is not one).
- Deep flow nesting (`[[[[...`) overflows the recursive composer (RecursionError); it is refused
  at the first line deeper than MAX_DEPTH.
- Anchors can make a small file expand to billions of values ("billion laughs"): the composed node
  graph is measured with shared aliases counted once per use, and refused over MAX_VALUES.
"""
from __future__ import annotations

import re

import yaml

from pipesim.errors import ScenarioError

MAX_DIGITS = 30          # an integer in a scenario never needs more (2**64 has 20 digits)
MAX_DEPTH = 64           # nesting levels of mappings/sequences
MAX_VALUES = 100_000     # scalars after expanding aliases
MAX_BYTES = 10 * 2**20   # a scenario file larger than this is not a scenario

# YAML 1.2 core schema, float (https://yaml.org/spec/1.2.2/ 10.3.2): digits with an optional dot
# and exponent, plus .inf/.nan (these are rejected later where a finite number is expected).
FLOAT_12 = re.compile(r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
                          |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats and bounded integers."""

    def construct_yaml_int(self, node):
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"integer with {digits} digits is too large (at most {MAX_DIGITS})", node.start_mark)
        return super().construct_yaml_int(node)


# The int resolver must win over the float one for plain digits: keep PyYAML's int resolver and
# put the 1.2 float pattern after it (resolvers are tried in order per first character).
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _first in list("-+0123456789."):
    _Loader.yaml_implicit_resolvers[_first] = [
        r for r in _Loader.yaml_implicit_resolvers.get(_first, [])
        if r[0] not in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp")]
    _Loader.yaml_implicit_resolvers[_first].append(("tag:yaml.org,2002:float", FLOAT_12))


def _deep_line(text: str) -> tuple[int, int] | None:
    """(line, column) where flow brackets first nest deeper than MAX_DEPTH. Quotes and comments
    are skipped line by line: rough, but enough to point at the place."""
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        quote, prev = None, " "
        for col, ch in enumerate(line, 1):
            if quote:
                quote = None if ch == quote else quote
            elif ch == "#" and prev.isspace():
                break
            elif ch in "'\"" and (prev.isspace() or prev in "[{,:"):
                quote = ch
            elif ch in "[{":
                depth += 1
                if depth > MAX_DEPTH:
                    return number, col
            elif ch in "]}":
                depth = max(0, depth - 1)
            prev = ch
    return None


def _measure(node, depth: int = 0, memo: dict | None = None) -> int:
    """Scalars below `node`, an alias counted in full each time it is used; raises ScenarioError
    over MAX_DEPTH levels. Memoised by node identity, so a bomb is measured in linear time."""
    memo = {} if memo is None else memo
    if id(node) in memo:
        return memo[id(node)]
    if depth > MAX_DEPTH:
        raise _Deep(node.start_mark)
    if isinstance(node, yaml.ScalarNode):
        n = 1
    elif isinstance(node, yaml.SequenceNode):
        n = sum(_measure(v, depth + 1, memo) for v in node.value)
    else:
        n = sum(_measure(k, depth + 1, memo) + _measure(v, depth + 1, memo) for k, v in node.value)
    memo[id(node)] = n
    if n > MAX_VALUES:          # raised at the smallest node over the limit: the bomb's anchor
        raise _Big(node.start_mark, n)
    return n


class _Deep(Exception):
    def __init__(self, mark):
        self.mark = mark


class _Big(Exception):
    def __init__(self, mark, values):
        self.mark, self.values = mark, values


def _where(mark) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def load_text(text: str, source: str):
    """Parse one YAML document from `text`; errors name `source` and the line/column."""
    if len(text) > MAX_BYTES:
        raise ScenarioError(f"{source}: {len(text) / 2**20:.0f} MB is too large for a scenario "
                            f"(at most {MAX_BYTES // 2**20} MB)")
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:          # a control character: position, no mark
        line = text.count("\n", 0, exc.position) + 1
        raise ScenarioError(f"{source}: YAML syntax error at line {line}: unacceptable character "
                            f"#x{exc.character if isinstance(exc.character, int) else ord(exc.character):04x}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node)
        return loader.construct_document(node)
    except _Big as exc:
        raise ScenarioError(f"{source}: the value{_where(exc.mark)} expands to {exc.values:,} values through "
                            f"anchors/aliases (at most {MAX_VALUES:,} in a scenario)") from None
    except _Deep as exc:
        raise ScenarioError(f"{source}: nesting deeper than {MAX_DEPTH} levels{_where(exc.mark)}") from None
    except RecursionError:
        at = _deep_line(text)
        where = f" at line {at[0]}, column {at[1]}" if at else ""
        raise ScenarioError(f"{source}: nesting deeper than {MAX_DEPTH} levels{where}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        kind = "YAML value" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
        raise ScenarioError(f"{source}: {kind}{_where(mark)}: {problem}") from None
    finally:
        loader.dispose()
