"""Cost-model formulas against hand computation."""
import pytest

from pipesim.costs.collectives import GroupPlacement, Link, collective_time, flat_time, p2p_time
from pipesim.costs.layers import layer_ops
from pipesim.costs.memory import static_memory
from pipesim.costs.roofline import CostModel
from pipesim.costs.stage import stage_costs
from pipesim.costs.summary import iteration_flops, megatron_flops, total_params
from pipesim.presets.models import MODELS
from pipesim.scenario.load import load_scenario


def scenario(model="gpt2-small", **parallel):
    par = dict(tensor=1, pipeline=1)
    par.update(parallel)
    gpus = par["tensor"] * par["pipeline"] * par.get("data", 1)
    return load_scenario({
        "model": {"preset": model} if isinstance(model, str) else model,
        "system": {"preset": "dgx-a100-80gb", "gpus_per_node": gpus},
        "parallel": par,
        # the papers' formulas are for the materialized softmax (eager attention)
        "training": {"micro_batch_size": 2, "global_batch_size": 2 * par.get("data", 1) * 4,
                     "precision": "bf16", "attention": "eager"},
    })


# Brown et al. Table 2.1 names sizes to two significant figures ("350M", "1.3B"); for those the
# check allows the rounding of the published figure (half a unit of its last digit) when that
# exceeds 1 %. Exact released counts (GPT-2, Llama, BERT) and GPT-3 175B are held to 1 %.
# "350M" is looser than its digits: the table's own shape (24 x 1024, n_ctx 2048, vocab 50257)
# has 355.9M parameters, 1.7 % above the label, so it is allowed 2 %.
# Nemotron-H "8B" is a name, not a count (its shapes give 8.10B): half a billion.
ROUNDED = {"gpt3-350m": 7e6, "gpt3-1.3b": 0.05e9, "gpt3-2.7b": 0.05e9, "gpt3-13b": 0.5e9, "nemotronh-8b": 0.5e9}


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m.get("reference_params")])
def test_parameter_counts_match_published(name):
    # the counts do not depend on the system; H100, since DSA models need an SM90 sparse kernel
    s = load_scenario({"model": name, "system": "dgx-h100", "parallel": {"data": 8},
                       "training": {"global_batch_size": 8}})
    ref = MODELS[name]["reference_params"]
    tol = max(0.01 * ref, ROUNDED.get(name, 0.0))
    assert abs(total_params(s) - ref) <= tol


def test_gpt2_small_exact_count():
    # 50257*768 (tokens) + 1024*768 (positions) + 12*(12*768^2 + 13*768) + 2*768 (final norm)
    s = scenario()
    assert total_params(s) == 50257 * 768 + 1024 * 768 + 12 * (12 * 768**2 + 13 * 768) + 2 * 768


def test_matmul_flops_are_2mnk():
    s = scenario()
    ops = {o.name: o for o in layer_ops(s)}
    T = 2 * 1024
    assert ops["fc1"].flops_fwd == 2 * T * 768 * 3072
    assert ops["fc1"].flops_bwd == 2 * ops["fc1"].flops_fwd
    assert ops["qkv"].flops_fwd == 2 * T * 768 * 3 * 768


def test_layer_flops_match_narayanan_eq3():
    # Without recompute the model FLOPs per step are 72 B s l h^2 (1 + s/6h + V/12lh)
    # (Narayanan et al. SC'21 Eq. 3 derivation); pipesim sums its ops (vector ops add < 0.5 %).
    s = scenario("gpt3-1.3b")
    assert iteration_flops(s) == pytest.approx(megatron_flops(s, recompute=False), rel=5e-3)


def test_roofline_takes_the_max():
    import dataclasses
    s = scenario()
    gpu = dataclasses.replace(s.system.gpu, matmul_efficiency=0.7)     # explicit flat override
    cm = CostModel(gpu, "bf16")
    fc1 = {o.name: o for o in layer_ops(s)}["fc1"]
    t = cm.time(fc1, "fwd")
    assert t.compute == pytest.approx(fc1.flops_fwd / (312e12 * gpu.matmul_efficiency))
    assert t.memory == pytest.approx(fc1.bytes_fwd / (2039e9 * gpu.memory_efficiency))
    assert t.seconds == max(t.compute, t.memory) and t.source == "roofline"


def test_launch_cost_overlaps_on_gpus_and_adds_on_synchronous_hosts():
    import dataclasses
    s = scenario()
    ln = {o.name: o for o in layer_ops(s)}["ln1"]
    fc1 = {o.name: o for o in layer_ops(s)}["fc1"]
    big = dataclasses.replace(s.system.gpu, kernel_launch=1e-3)         # a 1 ms launch dominates
    gpu = CostModel(big, "bf16")
    kernel = max(gpu.roofline(ln.flops_fwd, ln.bytes_fwd, "vector"))
    assert gpu.time(ln, "fwd").seconds == 1e-3                           # max(kernel, launch)
    assert gpu.time(fc1, "bwd").seconds == 2e-3                          # dgrad + wgrad kernels
    host = CostModel(dataclasses.replace(big, launch_overlaps=False), "bf16")
    assert host.time(ln, "fwd").seconds == pytest.approx(kernel + 1e-3)  # kernel + launch


def test_collective_formulas():
    link = Link(bandwidth=100e9, latency=5e-6)
    B, n = 1e9, 8
    assert flat_time("all_reduce", B, n, link, "ring") == pytest.approx(2 * 7 * 5e-6 + 2 * 7 / 8 * B / 100e9)
    assert flat_time("all_gather", B, n, link, "ring") == pytest.approx(7 * 5e-6 + 7 / 8 * B / 100e9)
    assert flat_time("all_reduce", B, n, link, "tree") == pytest.approx(2 * 3 * 5e-6 + 2 * B / 100e9)
    assert p2p_time(B, link) == pytest.approx(5e-6 + B / 100e9)
    intra, inter = Link(300e9, 2e-6), Link(25e9, 5e-6)
    g = GroupPlacement(size=16, per_node=8, intra=intra, inter=inter)
    hier = (flat_time("reduce_scatter", B, 8, intra, "ring") + flat_time("all_reduce", B / 8, 2, inter, "ring")
            + flat_time("all_gather", B, 8, intra, "ring"))
    assert collective_time("all_reduce", B, g, "hierarchical") == pytest.approx(hier)
    # NCCL's ring across nodes: 8 members x 25 GB/s NICs = 200 GB/s per rank (< 300 NVLink);
    # 2 of the 30 steps cross nodes (5 us), 28 stay on NVLink (2 us)
    assert collective_time("all_reduce", B, g, "ring") == pytest.approx(28 * 2e-6 + 2 * 5e-6 + 30 / 16 * B / 200e9)
    assert collective_time("all_reduce", B, g, "auto") == min(
        collective_time("all_reduce", B, g, a) for a in ("ring", "tree"))
    assert collective_time("all_reduce", B, GroupPlacement(1, 1, intra, inter)) == 0.0


def test_zero_memory_matches_rajbhandari_fig1():
    # ZeRO paper Fig. 1: 7.5B parameters, N_d = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
    psi = 7.5e9
    for stage, gb in [(0, 120), (1, 31.4), (2, 16.6), (3, 1.9)]:   # figure rounds to 0.1 GB
        assert static_memory(psi, "bf16", "adam", stage, 64).total / 1e9 == pytest.approx(gb, abs=0.05)


def _layer_saved(s):
    return stage_costs(s)[0].activation_bytes


def _stack(model, layers=4, **par):
    m = dict(MODELS[model], num_layers=layers, dropout=True)
    m.pop("reference_params", None)
    return m


@pytest.mark.parametrize("t,sp", [(1, False), (4, False), (4, True)])
def test_korthikanti_activation_formulas(t, sp):
    # Korthikanti et al. 2022: no parallelism sbh(34 + 5as/h) (Eq. 1); tensor parallel
    # sbh(10 + 24/t + 5as/(ht)) (Eq. 2); tensor + sequence parallel sbh/t (34 + 5as/h) (Eq. 3).
    from pipesim.costs.layers import layer_ops
    sc = scenario("gpt3-1.3b", tensor=t, sequence_parallel=sp)
    s_, b, h, a = 2048, 2, 2048, 16
    per_layer = sum(o.saved_bytes for o in layer_ops(sc))
    if t == 1:
        expected = s_ * b * h * (34 + 5 * a * s_ / h)
    elif not sp:
        expected = s_ * b * h * (10 + 24 / t + 5 * a * s_ / (h * t))
    else:
        expected = s_ * b * h / t * (34 + 5 * a * s_ / h)
    assert per_layer == pytest.approx(expected, rel=1e-12)


def test_recompute_policies_follow_korthikanti():
    base = dict(tensor=4, sequence_parallel=True)
    s_, b, h, t, L = 2048, 2, 2048, 4, 24
    def stage(policy):
        sc = load_scenario(scenario("gpt3-1.3b", **base), [f"training.recompute={policy}"])
        st = stage_costs(sc)[0]
        # remove embedding/head extras to compare per-layer terms
        from pipesim.costs.layers import embedding_ops, head_ops
        extras = sum(o.saved_bytes for o in embedding_ops(sc) + head_ops(sc))
        return st, (st.activation_bytes - extras) / L
    _, selective = stage("selective")
    assert selective == pytest.approx(34 * s_ * b * h / t)          # Sec. 4.2: 34 sbh / t
    full_st, full = stage("full")
    assert full == pytest.approx(2 * s_ * b * h / t)                 # layer input only
    none_st, _ = stage("none")
    assert full_st.recompute > 0 and none_st.recompute == 0
    assert full_st.backward == pytest.approx(none_st.backward + full_st.recompute)
    assert full_st.input_grad + full_st.weight_grad == pytest.approx(full_st.backward)


def test_block_recompute_of_the_first_n_layers_interpolates_none_and_full():
    # Megatron --recompute-method block --recompute-num-layers N: N layers of the chunk recompute
    base = scenario("gpt3-1.3b", tensor=4, sequence_parallel=True)
    def stage(*sets):
        return stage_costs(load_scenario(base, list(sets)))[0]
    none, full = stage("training.recompute=none"), stage("training.recompute=full")
    L = 24
    for n in (0, 6, 24, 40):
        st = stage("training.recompute=full", f"training.recompute_num_layers={n}")
        k = min(n, L) / L
        assert st.recompute == pytest.approx(k * full.recompute)
        assert st.activation_bytes == pytest.approx(none.activation_bytes + k * (full.activation_bytes - none.activation_bytes))
        assert st.backward == pytest.approx(none.backward + st.recompute)
    assert stage("training.recompute=full", "training.recompute_num_layers=0").recompute_working_bytes == 0


@pytest.mark.parametrize("sets,needle", [
    (["training.recompute_num_layers=2"], "needs recompute: full"),
    (["training.recompute=full", "training.recompute_num_layers=-1"], "must not be negative"),
])
def test_block_recompute_bad_values_get_one_line_errors(sets, needle):
    from pipesim.errors import ScenarioError
    with pytest.raises(ScenarioError, match=needle):
        load_scenario(scenario("gpt3-1.3b"), sets)


def test_partitioner_refuses_block_recompute():
    from pipesim.errors import PipesimError
    from pipesim.partition.transformer import transformer_graph
    s = load_scenario(scenario("gpt3-1.3b"), ["training.recompute=full", "training.recompute_num_layers=4"])
    with pytest.raises(PipesimError, match="recompute_num_layers"):
        transformer_graph(s)
