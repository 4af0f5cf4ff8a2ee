"""Packed sequences with a document mask (training.document_length, pipesim/costs/documents.py)."""
import math

import numpy as np
import pytest

from pipesim import load_scenario, simulate
from pipesim.costs.context import context_comm
from pipesim.costs.documents import length_mix, pieces
from pipesim.costs.flash import attention_tflops
from pipesim.costs.layers import layer_ops
from pipesim.costs.roofline import CostModel
from pipesim.costs.summary import iteration_flops
from pipesim.errors import ScenarioError
from pipesim.presets.gpus import curve


def scenario(doc=None, cv=1.0, seq=32768, **extra):
    model = {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "num_kv_heads": 2, "seq_length": seq,
             "vocab_size": 4096, "norm": "rmsnorm", "activation": "swiglu", "position": "rotary", "bias": False,
             "dropout": False, **extra.pop("model", {})}
    par = {"tensor": 1, "pipeline": 1, "data": 8, **extra.pop("parallel", {})}
    training = {"micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16", "attention": "flash",
                "document_length": doc, "document_length_cv": cv, **extra.pop("training", {})}
    return load_scenario({"model": model, "system": {"preset": "dgx-h100", "num_nodes": 1}, "parallel": par,
                          "training": training})


def attention(s, name="attention"):
    return {o.name: o for o in layer_ops(s)}[name]


@pytest.mark.parametrize("mean,cv", [(1000, 1.0), (1000, 0.0), (1000, 2.5), (1000, 0.3), (50_000, 1.0),
                                     (50_000, 0.0), (8192, 0.05), (4096, 0.001), (1, 3.0), (50, 100.0)])
def test_the_pieces_tile_the_window(mean, cv):
    # renewal identity: the pieces' lengths add up to the window, whatever the length distribution
    assert pieces(8192, mean, cv).expected(lambda ls: ls) == pytest.approx(8192, rel=5e-4)


@pytest.mark.parametrize("mean", [300, 2000, 8192, 40_000])
def test_exponential_lengths_match_the_closed_form(mean):
    # boundaries a Poisson process of rate 1/mu: E[sum l^2] = int int exp(-|x-y|/mu) dx dy over the window
    S, mu = 8192, float(mean)
    closed = 2 * mu / S - 2 * mu * mu / (S * S) * (1 - math.exp(-S / mu))
    assert pieces(S, mean, 1.0).fraction() == pytest.approx(closed, rel=1e-4)


def test_fixed_lengths_at_a_random_phase():
    S = 8192
    L = 1000      # whole documents of L between two pieces uniform on [0, L]
    assert pieces(S, L, 0.0).fraction() == pytest.approx(((S - L) * L + 2 * L * L / 3) / S ** 2, rel=1e-3)
    L = 20_000    # longer than the window: at most one boundary in it
    assert pieces(S, L, 0.0).fraction() == pytest.approx(1 - S / (3 * L), rel=1e-3)


def test_a_narrow_spread_tends_to_fixed_lengths():
    assert pieces(8192, 1000, 0.001).fraction() == pytest.approx(pieces(8192, 1000, 0.0).fraction(), rel=1e-3)


def test_a_wider_spread_of_lengths_means_more_attention():
    # at one mean, long documents carry the pairs (E[l^2] = mean^2 (1 + cv^2) for whole documents)
    fractions = [pieces(32768, 2048, cv).fraction() for cv in (0.0, 0.5, 1.0, 2.0)]
    assert fractions == sorted(fractions) and fractions[-1] > 2 * fractions[0]


def test_the_length_mix_splits_the_work():
    p = pieces(32768, 2048, 1.0)
    mix = length_mix(p, np.square)
    assert sum(share for share, _ in mix) == pytest.approx(1.0)
    lengths = [length for _, length in mix]
    assert lengths == sorted(lengths) and 0 < lengths[0] and lengths[-1] <= 32768


def test_fused_attention_does_the_pieces_work_only():
    whole, packed = attention(scenario()), attention(scenario(2048))
    f = pieces(32768, 2048, 1.0).fraction()
    assert packed.flops_fwd == pytest.approx(f * whole.flops_fwd) and packed.flops_bwd == pytest.approx(f * whole.flops_bwd)
    assert packed.bytes_fwd == whole.bytes_fwd and packed.saved_bytes == whole.saved_bytes   # same Q, K, V, O
    others = lambda s: [o for o in layer_ops(s) if o.name != "attention"]
    assert others(scenario(2048)) == others(scenario())
    # model FLOPs lose exactly the attention pairs the mask removes
    layers, per_mb = 4, 8
    removed = layers * per_mb * (1 - f) * (whole.flops_fwd + 2 * whole.flops_fwd)
    assert iteration_flops(scenario()) - iteration_flops(scenario(2048)) == pytest.approx(removed)


def test_each_piece_length_runs_at_its_own_table_rate():
    s = scenario(2048)
    op = attention(s)
    cm = CostModel(s.system.gpu, "bf16")
    c = curve("h100")
    factor = cm.curve_factor("bf16")
    for phase, flops in (("fwd", op.flops_fwd), ("bwd", op.flops_bwd)):
        want = sum(share * flops / (attention_tflops(c, length, True, phase, "auto", op.flash[2]) * factor * 1e12)
                   for share, length, _ in op.seq_mix)
        assert cm.time(op, phase).compute == pytest.approx(want)
    # short pieces run below the whole sequence's rate: less than the FLOPs share of the time saved
    whole = attention(scenario())
    assert cm.time(op, "fwd").compute > pieces(32768, 2048, 1.0).fraction() * cm.time(whole, "fwd").compute


@pytest.mark.parametrize("par", [{}, {"context": 4, "data": 2}, {"context": 4, "data": 2, "context_mode": "allgather"}])
def test_shorter_documents_never_slow_a_step(par):
    # less attention per ring step can only leave more of the same exchange exposed, never more time
    steps = [simulate(scenario(doc, parallel=par), trace=False).step_time_s for doc in (None, 16384, 4096, 1024, 256)]
    assert steps == sorted(steps, reverse=True) and steps[-1] < 0.95 * steps[0]


def test_context_parallel_blocks_shrink_and_expose_the_ring():
    par = {"context": 4, "data": 2}
    whole, packed = scenario(parallel=par), scenario(1024, parallel=par)
    f = pieces(32768, 1024, 1.0).fraction()
    blocks = lambda s: [o for o in layer_ops(s) if o.name.startswith("attention.cp")]
    for a, b in zip(blocks(whole), blocks(packed)):
        assert b.flops_fwd == pytest.approx(f * a.flops_fwd)
        # a block's key length scales with its document: l / seq of the whole sequence's block
        assert max(length for _, length, _ in b.seq_mix) <= a.flash[1]
    cm = CostModel(whole.system.gpu, "bf16")
    comm = lambda s: context_comm(s, cm, layer_ops(s))
    # the same K/V travel around the ring, under less attention
    assert comm(packed).bytes_fwd == comm(whole).bytes_fwd
    assert comm(packed).fwd_exposed > comm(whole).fwd_exposed


def test_sliding_windows_inside_documents():
    w = 512
    band = lambda s: attention(s, "attention_window")
    win = {"window_size": w}
    whole, packed = band(scenario(model=win)), band(scenario(128, 0.0, model=win))
    # every document (128 tokens) is shorter than the window: each piece attends causally in full
    pairs = pieces(32768, 128, 0.0).expected(lambda ls: ls * ls / 2)
    assert packed.flops_fwd == pytest.approx(whole.flops_fwd * pairs / (32768 * w - w * w / 2))
    assert all(length <= w and band_seq == 0.0 for _, length, band_seq in packed.seq_mix)


def test_eager_attention_computes_every_score_under_the_mask():
    eager = {"training": {"attention": "eager"}}
    assert layer_ops(scenario(1024, **eager)) == layer_ops(scenario(**eager))


def test_chunked_attention_inside_documents():
    # Llama 4's local layers: causal within chunks of w; a chunk is a window of the same documents,
    # so each whole chunk keeps the share of a w-token sequence
    w = 4096
    chunked = {"window_size": w, "window_kind": "chunked"}
    band = lambda s: attention(s, "attention_window")
    whole, packed = band(scenario(model=chunked)), band(scenario(1024, model=chunked))
    assert packed.flops_fwd == pytest.approx(whole.flops_fwd * pieces(w, 1024, 1.0).fraction())
    assert max(length for _, length, _ in packed.seq_mix) <= w


@pytest.mark.parametrize("extra,needle", [
    ({"parallel": {"context": 2, "data": 4, "context_layout": "contiguous"}}, "balanced"),
])
def test_unmodelled_combinations_are_one_line_errors(extra, needle):
    with pytest.raises(ScenarioError, match="training.document_length") as e:
        scenario(1024, **extra)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("key,value", [("document_length", 0), ("document_length_cv", -0.5),
                                       ("document_length", "long")])
def test_bad_values_name_the_key(key, value):
    with pytest.raises(ScenarioError, match=f"training.{key}") as e:
        scenario(training={key: value}) if key != "document_length" else scenario(value)
    assert "\n" not in str(e.value)


def test_without_documents_nothing_changes():
    s = scenario()
    assert s.training.document_length is None
    assert all(not o.seq_mix for o in layer_ops(s))


def test_the_reports_name_the_documents_and_their_share():
    from pipesim.costs.documents import documents_text
    from pipesim.report.html import _metrics
    s = scenario(2048)
    text = documents_text(s)
    assert text.startswith("~2,048 tokens (cv 1)") and f"{100 * pieces(32768, 2048, 1.0).fraction():.1f} %" in text
    assert documents_text(scenario()) == ""
    assert "eager attention computes every score" in documents_text(scenario(2048, training={"attention": "eager"}))
    rep = simulate(s, trace=False)
    assert "packed documents" in _metrics(rep.data, s)


def test_an_exposed_ring_over_short_documents_is_offered_a_smaller_one():
    # 2K documents leave little attention to hide each of the 15 hops under: halving the ring (its
    # GPUs to data parallelism) is simulated as a suggestion, and it is faster (on 141 GiB parts:
    # on 80 GiB ones CP 8's 16K tokens a GPU, logits and their loss working set do not fit)
    from pipesim.report.explain import explain
    base = "scenarios/longseq/llama3-8b-128k-docs-h100.yaml"
    s = load_scenario(base, ["parallel.tensor=1", "parallel.context=16", "parallel.data=16",
                             "training.zero_stage=3", "training.document_length=2048", "system.gpu.memory_GiB=141"])
    rep = simulate(s, trace=False)
    assert rep.data["exposed_comm_s"]["CP"] > 0.3 * rep.data["step_time_s"]
    why = explain(rep, s)
    smaller = [x for x in why["suggestions"] if x["title"] == "context 8 (data 32)"]
    assert smaller and smaller[0]["step_time_s"] < rep.data["step_time_s"]


@pytest.mark.parametrize("seq,mean,cv", [(131072, 4096, 1.0), (8192, 1000, 2.0), (32768, 300, 0.5)])
def test_sampled_sequences_carry_the_expected_pairs(seq, mean, cv):
    from pipesim.costs.documents import sequence_work
    work = sequence_work(seq, float(mean), cv)
    assert work.mean() / seq ** 2 == pytest.approx(pieces(seq, mean, cv).fraction(), rel=0.03)


def test_the_slowest_replica_grows_with_replicas_and_shrinks_with_their_sequences():
    from pipesim.costs.documents import replica_imbalance
    k = lambda r, n: replica_imbalance(131072, 4096.0, 1.0, r, n)
    assert k(1, 4) == 1.0
    assert 1.0 < k(2, 4) < k(8, 4) < k(64, 4)
    assert k(8, 64) < k(8, 4) < k(8, 1)
    # heavier-tailed lengths, heavier slowest replica
    assert replica_imbalance(131072, 4096.0, 2.0, 8, 4) > k(8, 4)


def test_random_packing_times_the_slowest_replica_and_counts_the_mean():
    rand, bal = scenario(1024), scenario(1024, training={"document_packing": "balanced"})
    from pipesim.costs.documents import imbalance_of
    slowest = imbalance_of(rand)
    assert slowest > 1.05 and imbalance_of(bal) == 1.0
    a, b = attention(rand), attention(bal)
    assert a.flops_fwd == b.flops_fwd and iteration_flops(rand) == iteration_flops(bal)
    assert sum(w for w, _, _ in a.seq_mix) == pytest.approx(slowest) and sum(w for w, _, _ in b.seq_mix) == pytest.approx(1.0)
    cm = CostModel(rand.system.gpu, "bf16")
    assert cm.time(a, "fwd").compute == pytest.approx(slowest * cm.time(b, "fwd").compute)
    assert simulate(rand, trace=False).step_time_s > simulate(bal, trace=False).step_time_s


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_the_central_limit_takes_over_where_sampling_stops(monkeypatch, cv):
    # ~3,000 documents a sequence: the sampled replica sums and the renewal-reward normal agree
    import pipesim.costs.documents as d
    sampled = d.replica_imbalance(1048576, 350.0, cv, 64, 2)
    monkeypatch.setattr(d, "SAMPLED_DOCUMENTS", 1)
    d.replica_imbalance.cache_clear()
    try:
        normal = d.replica_imbalance(1048576, 350.0, cv, 64, 2)
    finally:
        d.replica_imbalance.cache_clear()
    assert normal - 1 == pytest.approx(sampled - 1, rel=0.1)
    # a million one-token documents a sequence is not sampled (it would be a billion draws)
    assert 1.0 < d.replica_imbalance(1048576, 1.0, cv, 100_000, 1) < 1.05


def test_the_accuracy_line_says_no_published_run_had_packed_documents():
    from pipesim.report.accuracy import accuracy_of, accuracy_text
    packed, whole = accuracy_of(scenario(2048)), accuracy_of(scenario())
    assert accuracy_text(packed).endswith("none of them with packed documents")
    assert "packed documents" not in accuracy_text(whole)


def test_window_bands_have_their_own_work_and_spread():
    # the sampled sequences cross-check the exact sliding-band and chunked shares, and a band's
    # work varies far less than full attention's (it grows as l, not l^2, past the window)
    from pipesim.costs.documents import attention_mix, chunked_mix, replica_imbalance, sequence_work
    S, mean, w, c = 131072, 4096.0, 512.0, 8192
    band = sequence_work(S, mean, 1.0, w)
    assert band.mean() / (S * w - w * w / 2) == pytest.approx(attention_mix(S, mean, 1.0, w)[0], rel=0.02)
    chunked = sequence_work(S, mean, 1.0, float(c), True)
    assert chunked.mean() / ((S // c) * c * c) == pytest.approx(chunked_mix(S, mean, 1.0, c)[0], rel=0.03)
    full = replica_imbalance(S, mean, 1.0, 32, 2)
    assert 1.0 < replica_imbalance(S, mean, 1.0, 32, 2, w) < replica_imbalance(S, mean, 1.0, 32, 2, float(c), True) < full
