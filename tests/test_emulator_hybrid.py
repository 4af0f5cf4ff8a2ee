"""Hybrid Mamba models on the emulated ranks (pipesim/emulator/mamba.py): the scan against the
recurrence it stands for, and loss and gradients of pipeline / tensor-parallel runs equal to one
process."""
import os

import pytest

torch = pytest.importorskip("torch")

from _emulator_helpers import matches_single_process  # noqa: E402
from pipesim.emulator.gated_delta import delta_rule  # noqa: E402
from pipesim.emulator.mamba import ssd_chunked, ssd_scan  # noqa: E402

HERE = os.path.dirname(__file__)
HYBRID = os.path.join(HERE, "..", "scenarios", "emulator", "tiny_hybrid.yaml")


def inputs(s=13, b=2, h=4, p=3, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
    return r(s, b, h, p), torch.rand(s, b, h, generator=g, dtype=torch.float64), \
        -torch.rand(h, generator=g, dtype=torch.float64), r(s, b, h, n), r(s, b, h, n), r(h)


def test_the_scan_is_the_state_space_recurrence():
    """h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T, y_t = C_t h_t + D x_t (Dao & Gu 2024, Eq. 1-2)."""
    x, dt, A, B, C, D = inputs()
    state = torch.zeros(x.shape[1], x.shape[2], x.shape[3], B.shape[3], dtype=torch.float64)
    ys = []
    for t in range(x.shape[0]):
        state = torch.exp(dt[t] * A)[..., None, None] * state + \
            (dt[t][..., None, None] * x[t][..., None] * B[t][..., None, :])
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[t]) + D[:, None] * x[t])
    torch.testing.assert_close(ssd_scan(x, dt, A, B, C, D), torch.stack(ys))


@pytest.mark.parametrize("chunk", [1, 4, 16])
def test_chunked_scan_equals_the_quadratic_form(chunk):
    x, dt, A, B, C, D = inputs()
    torch.testing.assert_close(ssd_chunked(x, dt, A, B, C, D, chunk), ssd_scan(x, dt, A, B, C, D))


@pytest.mark.parametrize("sets", [[], ["parallel.tensor=2", "parallel.pipeline=1", "parallel.sequence_parallel=true"]])
def test_hybrid_model_matches_one_process(tmp_path, sets):
    s, result = matches_single_process(HYBRID, tmp_path, sets, timeout=120)
    assert s.model.hybrid_layer_pattern and {"F", "B"} <= {e["kind"] for e in result["events"]}


def test_the_scan_and_conv_are_calibration_ops_on_cpu_only():
    from pipesim.calibrate.ops import make_runner
    from pipesim.costs.profile import work_of
    shape = dict(batch=1, seq=32, heads=4, head_dim=8, state=8, groups=2, chunk=8, dtype="fp32")
    fn, impl = make_runner("ssd_fwd", shape, "cpu")
    assert impl == "torch" and fn().shape == (32, 1, 4, 8)
    grads = make_runner("ssd_bwd", shape, "cpu")[0]()
    assert len(grads) == 4                                           # x, dt, B, C
    with pytest.raises(ValueError, match="CPU"):
        make_runner("ssd_fwd", shape, "cuda")
    # the profile's work for the key is the op's forward FLOPs (pipesim/costs/mamba.py ssd_op)
    from pipesim import load_scenario
    from pipesim.costs.layers import layer_ops
    s = load_scenario(HYBRID)
    ssd = next(o for o in layer_ops(s, "mamba") if o.name == "ssd")
    (key, measured), = ssd.measure_fwd
    assert key == "ssd_fwd" and work_of(key, measured) == pytest.approx(ssd.flops_fwd)
    conv = make_runner("conv1d_bwd", dict(tokens=16, channels=6, kernel=4, dtype="fp32"), "cpu")[0]()
    assert conv[0].shape == (1, 6, 16)


def test_delta_rule_stores_and_recalls_orthonormal_keys():
    """With no decay (g = 0) and full writes (beta = 1), the delta rule's state maps each of a set
    of orthonormal keys to its value: querying with key j returns v_j (Yang et al. 2024, Sec. 2)."""
    keys = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))[0]
    v = torch.randn(6, 1, 1, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    k = keys.T.reshape(6, 1, 1, 6)                                    # 6 steps, one head
    zeros, ones = torch.zeros(6, 1, 1, dtype=torch.float64), torch.ones(6, 1, 1, dtype=torch.float64)
    o = delta_rule(k, k, v, zeros, ones, 1.0)                         # query step t with key t
    torch.testing.assert_close(o, v)                                  # each recalled once written
    assert delta_rule(k, k, v, zeros, 0 * ones, 1.0).abs().max() == 0    # beta = 0 writes nothing


def test_gated_deltanet_hybrid_matches_one_process(tmp_path):
    sets = ['model.hybrid_layer_pattern="G-M*-G"', "model.gdn_num_key_heads=2", "model.gdn_num_value_heads=4",
            "model.gdn_key_head_dim=8", "model.gdn_value_head_dim=8"]
    s, _ = matches_single_process(HYBRID, tmp_path, sets, timeout=120)
    assert s.model.hybrid_layer_pattern.count("G") == 2
