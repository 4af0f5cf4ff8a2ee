"""training.cross_entropy: each loss kernel pays the memory passes its source makes."""
import pytest

from pipesim.costs.layers import head_ops, shapes_of
from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario
from pipesim.whatif.validation import case_scenario, load_cases


def _scenario(*sets):
    base = {"model": {"preset": "llama3-8b", "seq_length": 1024}, "system": {"preset": "dgx-h100"},
            "parallel": {"data": 8}, "training": {"micro_batch_size": 2, "global_batch_size": 16}}
    return load_scenario(base, list(sets))


def _ce(s):
    return {o.name: o for o in head_ops(s)}["cross_entropy"]


@pytest.mark.parametrize("impl, fwd, bwd, kept", [("megatron", 38, 14, 4), ("megatron_fused", 26, 14, 4),
                                                  ("te", 6, 4, 2), ("torch", 22, 26, 4)])
def test_bytes_per_logit_and_the_kept_tensor_follow_the_kernel(impl, fwd, bwd, kept):
    s = _scenario(f"training.cross_entropy={impl}")
    sh = shapes_of(s)
    logits = sh.b * sh.s * sh.v
    ce = _ce(s)
    assert (ce.bytes_fwd / logits, ce.bytes_bwd / logits, ce.saved_bytes / logits) == (fwd, bwd, kept)


def test_auto_is_the_stacks_own_kernel():
    assert _ce(_scenario()) == _ce(_scenario("training.cross_entropy=megatron"))
    eager = _scenario("training.kernel_fusion=eager")
    assert _ce(eager) == _ce(_scenario("training.kernel_fusion=eager", "training.cross_entropy=torch"))


def test_te_kernel_shortens_the_last_stage_and_frees_its_softmax():
    from pipesim import simulate
    base = ("parallel.pipeline=2", "parallel.data=4")
    slow, fast = (simulate(_scenario(*base, f"training.cross_entropy={k}")) for k in ("megatron", "te"))
    assert fast.step_time_s < slow.step_time_s
    assert fast.ranks[-1]["peak_memory_bytes"] < slow.ranks[-1]["peak_memory_bytes"]


def test_megatron_bridge_rows_use_transformer_engines_kernel():
    from pipesim.whatif.validation_bridge import BRIDGE_NO_PRESET
    rows = [c for c in load_cases() if c.suite in ("bridge2511", "bridge2604", "bridge2606", "bridge2608")
            and c.raw["model"]["name"] not in BRIDGE_NO_PRESET]
    assert rows and {case_scenario(c)["training"]["cross_entropy"] for c in rows} == {"te"}


def test_an_unknown_kernel_is_refused_with_the_key():
    with pytest.raises(ScenarioError, match="training.cross_entropy") as err:
        _scenario("training.cross_entropy=liger")
    assert "\n" not in str(err.value)
