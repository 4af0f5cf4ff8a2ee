"""Property: any mutation of a valid scenario either loads (and its stage costs compute) or is
refused with one ScenarioError line naming a key path or a line/column - never another exception.
The long run over every bundled scenario is benchmarks/fuzz_scenarios.py."""
import re

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.costs import stage_costs
from pipesim.errors import ScenarioError
from pipesim.scenario_load import load_scenario

BASE = {
    "model": {"preset": "gpt2-small", "num_layers": 4, "seq_length": 128},
    "system": {"preset": "dgx-a100-80gb", "gpu": {"memory_GiB": 80}},
    "parallel": {"tensor": 2, "pipeline": 2, "data": 2, "virtual_stages": 1},
    "training": {"micro_batch_size": 2, "global_batch_size": 16, "schedule": "1f1b", "grad_bucket_MB": 25.0,
                 "recompute": "none"},
}
PATHS = [(sec, key) for sec, body in BASE.items() for key in body] + [("system", "gpu", "memory_GiB")]
NAMED = re.compile(r"\b(model|system|parallel|training|costs)\b|line \d+")

hostile = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.sampled_from([{}, [], {"preset": {}}, "1e-9", 10**40, 1e30, 1e-9, 100000]))


def _check(fn):
    try:
        s = fn()
    except ScenarioError as exc:
        msg = str(exc)
        assert "\n" not in msg and NAMED.search(msg), msg
        return
    stage_costs(s)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=hostile)
def test_mutated_value_is_loaded_or_named(path, value):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    node = raw
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    _check(lambda: load_scenario(raw))


@settings(max_examples=80, deadline=None)
@given(path=st.sampled_from(PATHS), text=st.text(max_size=30))
def test_set_override_is_loaded_or_named(path, text):
    _check(lambda: load_scenario(BASE, [".".join(path) + "=" + text]))


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=0, max_value=400), junk=st.text(max_size=8))
def test_damaged_yaml_text_is_loaded_or_named(tmp_path_factory, cut, junk):
    text = yaml.safe_dump(BASE)
    path = tmp_path_factory.mktemp("fuzz") / "s.yaml"
    path.write_text(text[:cut] + junk + text[cut:])
    _check(lambda: load_scenario(path))
