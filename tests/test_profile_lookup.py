"""Cost profiles: validation errors name file and key; lookup is exact, log-log interpolated or
extrapolated at the nearest point's throughput; achieved() fits; device mismatch is an error."""
from __future__ import annotations

import json
import math

import pytest

from pipesim.costs.profile import (PROFILE_VERSION, CostProfile, load_profile, profile_from_dict,
                                   work_of)
from pipesim.errors import ProfileError


def _doc(measurements, kind="cpu", version=PROFILE_VERSION):
    return {"version": version, "device": {"name": "test-dev", "kind": kind},
            "created": "2026-01-01T00:00:00+00:00", "measurements": measurements}


def _m(op, shape, t):
    return {"op": op, "shape": shape, "median_s": t, "p10_s": t, "p90_s": t, "n": 5,
            "tflops": None, "gbps": None}


GEMM = [_m("gemm", dict(m=64, n=64, k=64, dtype="fp32"), 1e-5),
        _m("gemm", dict(m=128, n=128, k=128, dtype="fp32"), 8e-5)]
COPY = [_m("copy", dict(bytes=1), 1.0), _m("copy", dict(bytes=100), 10.0)]


def _write(tmp_path, doc, name="p.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def test_exact_shape_is_measured_and_dtype_aliases_match():
    p = profile_from_dict(_doc(GEMM))
    assert p.lookup("gemm", m=64, n=64, k=64, dtype="fp32") == (1e-5, "measured")
    assert p.lookup("gemm", m=64, n=64, k=64, dtype="float32") == (1e-5, "measured")


def test_log_log_interpolation_between_neighbours():
    p = profile_from_dict(_doc(GEMM + COPY))
    # gemm work 2·64·128·128 = 2^21 lies between 2^19 (1e-5 s) and 2^22 (8e-5 s); those two
    # points have slope 1 in log-log, so the time is 1e-5 · 2^21/2^19 = 4e-5.
    t, src = p.lookup("gemm", m=64, n=128, k=128, dtype="fp32")
    assert src == "interpolated" and t == pytest.approx(4e-5)
    # copy: (1 B, 1 s) and (100 B, 10 s): slope 1/2, so 10 B takes 10^0.5 s.
    t, src = p.lookup("copy", bytes=10)
    assert src == "interpolated" and t == pytest.approx(math.sqrt(10))


def test_extrapolation_keeps_nearest_throughput():
    p = profile_from_dict(_doc(GEMM + COPY))
    # 256^3 is 8x the work of 128^3: 8 · 8e-5 s. 32^3 is 1/8 of 64^3: 1e-5 / 8.
    assert p.lookup("gemm", m=256, n=256, k=256, dtype="fp32")[0] == pytest.approx(6.4e-4)
    assert p.lookup("gemm", m=32, n=32, k=32, dtype="fp32")[0] == pytest.approx(1.25e-6)
    assert p.lookup("copy", bytes=1000) == (pytest.approx(100.0), "interpolated")


def test_unmeasured_op_or_categorical_key_is_none():
    p = profile_from_dict(_doc(GEMM))
    assert p.lookup("gemm", m=64, n=64, k=64, dtype="bf16") is None
    assert p.lookup("attention_fwd", batch=1, heads=1, seq=8, head_dim=64, causal=False, dtype="fp32") is None
    assert p.lookup("something_new", x=1) is None


def test_causal_is_categorical():
    att = dict(batch=1, heads=2, seq=128, head_dim=64, dtype="fp16")
    p = profile_from_dict(_doc([_m("attention_fwd", dict(att, causal=False), 2e-4)]))
    assert p.lookup("attention_fwd", **att, causal=True) is None
    # seq 256 with the same keys: 4x the work, extrapolated at the same throughput
    t, _ = p.lookup("attention_fwd", **dict(att, seq=256), causal=False)
    assert t == pytest.approx(8e-4)


def test_achieved_is_work_over_time_of_the_larger_half():
    p = profile_from_dict(_doc(GEMM + COPY + [
        _m("sendrecv", dict(bytes=1e6), 1e-3), _m("allreduce", dict(bytes=1e6, ranks=4), 2e-3)]))
    # matmul: points (2^19 FLOP, 1e-5 s) and (2^22, 8e-5); larger half = the second: 2^22/8e-5
    assert p.achieved("matmul") == pytest.approx(2 ** 22 / 8e-5)
    # memory: copy moves 2·bytes; larger half = the 100-byte point: 200 B / 10 s
    assert p.achieved("memory") == pytest.approx(20.0)
    assert p.achieved("p2p") == pytest.approx(1e9)
    # ring bus bytes 2(n-1)/n · size = 1.5e6 in 2e-3 s
    assert p.achieved("allreduce") == pytest.approx(7.5e8)
    assert profile_from_dict(_doc(COPY)).achieved("matmul") is None
    with pytest.raises(ValueError):
        p.achieved("network")


def test_work_counts():
    assert work_of("gemm", dict(m=2, n=3, k=4, dtype="fp32")) == 48
    a = dict(batch=1, heads=2, seq=8, head_dim=4, dtype="fp16")
    assert work_of("attention_fwd", dict(a, causal=False)) == 4 * 2 * 64 * 4
    assert work_of("attention_fwd", dict(a, causal=True)) == 2 * 2 * 64 * 4
    assert work_of("attention_bwd", dict(a, causal=False)) == 2.5 * 4 * 2 * 64 * 4
    assert work_of("mlp_fwd", dict(tokens=2, hidden=3, ffn=12, dtype="fp32")) == 4 * 2 * 3 * 12


def test_save_load_round_trip(tmp_path):
    p = profile_from_dict(_doc(GEMM + COPY))
    p.save(tmp_path / "out.json")
    q = load_profile(tmp_path / "out.json")
    assert q.device["kind"] == "cpu" and len(q.measurements) == 4
    assert q.lookup("copy", bytes=10) == p.lookup("copy", bytes=10)


def test_an_in_model_mean_is_the_cost_and_survives_a_round_trip(tmp_path):
    # in-model timings are skewed right: an action's expected sum of calls is the sum of their means
    skewed = dict(_m("copy", dict(bytes=10), 1.0), impl="torch in-model", isolated_s=0.5, mean_s=1.25)
    p = profile_from_dict(_doc([skewed]))
    assert p.lookup("copy", bytes=10)[0] == pytest.approx(1.25)
    assert p.lookup("copy", bytes=40)[0] == pytest.approx(5.0)        # the curve runs through the mean
    p.save(tmp_path / "out.json")
    assert load_profile(tmp_path / "out.json").measurements[0].mean_s == pytest.approx(1.25)
    assert profile_from_dict(_doc(COPY)).measurements[0].mean_s is None   # timed alone: the median


@pytest.mark.parametrize("doc,needle", [
    ("{not json", "not valid JSON"),
    (json.dumps([1, 2]), "JSON object"),
    (_doc(GEMM, version=2), "version is 2"),
    ({"device": {"name": "x", "kind": "cpu"}, "measurements": []}, "'version'"),
    ({"version": 1, "measurements": []}, "'device'"),
    ({"version": 1, "device": {"name": "x"}, "measurements": []}, "device.kind"),
    (_doc(GEMM, kind="tpu"), "device.kind"),
    ({"version": 1, "device": {"name": "x", "kind": "cpu"}}, "'measurements'"),
    (_doc([{"op": "gemm", "shape": {"m": 1, "n": 1, "k": 1, "dtype": "fp32"}}]), "measurements[0]: missing key 'median_s'"),
    (_doc(GEMM + [_m("gemm", dict(m=1, n=1, dtype="fp32"), 1e-6)]), "measurements[2].shape"),
    (_doc([_m("copy", dict(bytes=8), "fast")]), "measurements[0].median_s"),
    (_doc([_m("copy", dict(bytes=-8), 1.0)]), "measurements[0].shape.bytes"),
    (_doc([dict(_m("copy", dict(bytes=8), 1.0), mean_s=-1.0)]), "measurements[0].mean_s"),
])
def test_malformed_profiles_name_file_and_key(tmp_path, doc, needle):
    path = _write(tmp_path, doc)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ProfileError, match="not found"):
        load_profile(tmp_path / "nope.json")


def test_device_mismatch_is_a_profile_error():
    p = profile_from_dict(_doc(GEMM, kind="cuda"), source="traces/h100.json")
    p.require_device("cuda")
    with pytest.raises(ProfileError, match=r"traces/h100.json.*'cuda'.*'cpu'"):
        p.require_device("cpu")


def test_unknown_ops_are_kept_for_exact_lookup_only():
    p = profile_from_dict(_doc([_m("rmsnorm_fwd", dict(rows=4, cols=8), 3e-6)]))
    assert isinstance(p, CostProfile)
    assert p.lookup("rmsnorm_fwd", rows=4, cols=8) == (3e-6, "measured")
    assert p.lookup("rmsnorm_fwd", rows=8, cols=8) is None


def test_mismatch_against_the_scenario_gpu():
    cpu = profile_from_dict(_doc(GEMM, kind="cpu"), source="traces/cpu.json")
    h100 = profile_from_dict({**_doc(GEMM, kind="cuda"), "device": {"name": "NVIDIA H100 80GB HBM3",
                                                                   "kind": "cuda"}}, source="traces/h100.json")
    assert cpu.mismatch("cpu-core-fp32") is None
    assert "traces/cpu.json" in cpu.mismatch("A100-SXM4-80GB")
    assert h100.mismatch("H100-SXM5-80GB") is None
    assert h100.mismatch("gpu") is None                       # no model number to compare
    assert "A100" in h100.mismatch("A100-SXM4-80GB")
    assert "cpu-core-fp32" in h100.mismatch("cpu-core-fp32")
