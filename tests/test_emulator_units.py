"""Emulator pieces without processes: memory counting, scaling, weight-gradient deferral, TP
reassembly, trace alignment and the compare tables."""
import pytest

torch = pytest.importorskip("torch")

from pipesim.report.compare import compare, err_pct, format_table  # noqa: E402
from pipesim.emulator import prepare  # noqa: E402
from pipesim.emulator.layers import Linear, WeightGradStore  # noqa: E402
from pipesim.emulator.memory import MemoryCounter  # noqa: E402
from pipesim.emulator.reference import _unshard  # noqa: E402
from pipesim.emulator.results import align  # noqa: E402
from pipesim.emulator.scale import parse_scale, scale_scenario  # noqa: E402
from pipesim.errors import PipesimError  # noqa: E402
from pipesim.report.trace import MemorySample, TraceEvent  # noqa: E402

import os  # noqa: E402

TINY = os.path.join(os.path.dirname(__file__), "..", "scenarios", "emulator", "tiny_1f1b.yaml")


def test_saved_tensors_counted_once_per_storage_and_freed_with_the_graph():
    c = MemoryCounter()
    w = torch.nn.Parameter(torch.randn(16, 16))
    c.skip_storage_of([w])
    x = torch.randn(4, 16, requires_grad=True)
    with c.hooks():
        y = torch.nn.functional.linear(x, w)       # saves x (256 B) and w (a weight: skipped)
        z = (y.tanh() * 2).sum()                   # tanh saves its output y.tanh() (256 B)
    assert c.activations == 2 * 4 * 16 * 4
    z.backward()
    assert c.activations == 0
    assert c.peak == 2 * 4 * 16 * 4


def test_split_backward_defers_weight_gradients_until_w():
    torch.manual_seed(0)
    store = WeightGradStore()
    lin = Linear(torch.randn(3, 5), torch.randn(3), store)
    for p in lin.parameters():
        p.grad = torch.zeros_like(p)
    x = torch.randn(2, 5, requires_grad=True)
    store.deferring, store.key = True, "k"
    lin(x).sum().backward()
    store.deferring = False
    assert torch.count_nonzero(lin.weight.grad) == 0          # I: input grad only
    torch.testing.assert_close(x.grad, lin.weight.detach().sum(0).expand(2, 5))
    assert store.run("k") == 1                                 # W
    torch.testing.assert_close(lin.weight.grad, x.detach().sum(0).expand(3, 5))


def test_unshard_concatenates_fused_parts_per_rank():
    full = torch.arange(12.0).view(6, 2)        # parts of 4 and 2 rows, tensor parallel of 2
    parts = (4, 2)
    shards = [torch.cat([full[0:2], full[4:5]]), torch.cat([full[2:4], full[5:6]])]
    torch.testing.assert_close(_unshard(shards, ("parts", 0, parts), 2), full)


def test_scale_shrinks_model_and_keeps_layout_valid():
    s = prepare(TINY, ["parallel.virtual_stages=2", "training.schedule=interleaved-1f1b"])
    small = scale_scenario(s, "width=0.5,depth=0.5,seq=0.5,vocab=0.5")
    assert small.model.hidden_size == 32 and small.model.num_attention_heads == 2
    assert small.model.num_layers == 4            # at least one layer per model stage (4)
    assert small.model.seq_length == 16 and small.model.vocab_size == 128
    for bad in ("0", "2", "width=0.5,colour=1", "abc"):
        with pytest.raises(PipesimError):
            parse_scale(bad)


def test_alignment_shifts_each_step_to_the_earliest_barrier():
    ev = [TraceEvent(0, "compute", "F", 0, 0, 10.5, 10.7, step=0), TraceEvent(1, "compute", "F", 1, 0, 10.8, 11.0, step=0)]
    mem = [MemorySample(1, 10.9, 100.0, {}, 0)]
    metas = [{"rank": 0, "kind": "step", "step": 0, "start": 10.4}, {"rank": 1, "kind": "step", "step": 0, "start": 10.5},
             {"rank": 1, "kind": "step_end", "step": 0, "peak": 123.0}]
    ev_by, mem_by, peaks = align(ev, mem, metas)
    assert [round(e.start, 9) for e in ev_by[0]] == [0.1, 0.4]
    assert round(mem_by[0][0].time, 9) == 0.5 and peaks[0][1] == 123.0


def _report(step, f, b, peak, stage_pp=0):
    events = [dict(rank=0, stream="compute", kind="F", stage=0, microbatch=0, start=0.0, end=f),
              dict(rank=0, stream="compute", kind="B", stage=0, microbatch=0, start=f, end=f + b)]
    return {"step_time_s": step, "throughput_samples_per_s": 8 / step, "bubble_fraction": 0.1,
            "peak_memory_bytes": peak, "events": events,
            "ranks": [{"rank": 0, "stage": stage_pp, "compute_busy_s": f + b, "bubble_fraction": 0.1,
                       "peak_memory_bytes": peak}]}


def test_compare_reports_signed_percent_errors():
    c = compare(_report(1.1, 0.3, 0.6, 110.0), _report(1.0, 0.25, 0.6, 100.0))
    assert c["step"]["step_time_error_pct"] == pytest.approx(10.0)
    f = next(a for a in c["actions"] if a["kind"] == "F")
    assert f["error_pct"] == pytest.approx(20.0)
    assert c["ranks"][0]["peak_memory_error_pct"] == pytest.approx(10.0)
    assert err_pct(1.0, 0.0) is None
    assert "step time" in format_table(c)


class _TwoIdenticalRanks:
    """A tensor group of two ranks holding the same shard, without processes: what the column
    linear asks of it, in order."""
    regather, size = True, 2

    def __init__(self):
        self.calls = []

    def all_gather0(self, t, phase):
        self.calls.append(("all_gather", phase))
        return torch.cat([t, t], 0)

    def reduce_scatter0(self, t, phase):
        self.calls.append(("reduce_scatter", phase))
        return 2 * t.chunk(2, 0)[0]


def test_a_column_linear_gathers_its_shard_again_for_the_weight_gradient():
    """Megatron's sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2): the forward gathers
    the shard and keeps only it; the backward gathers it again for dW and reduce-scatters dX.
    Frozen weights gather nothing in the backward."""
    tp = _TwoIdenticalRanks()
    w = torch.nn.Parameter(torch.randn(6, 4))
    lin = Linear(w, None, WeightGradStore())
    shard = torch.randn(3, 4, requires_grad=True)
    y = lin.gathered(shard, tp)
    assert y.shape == (6, 6) and tp.calls == [("all_gather", "fwd")]
    gy = torch.randn(6, 6)
    y.backward(gy)
    assert tp.calls[1:] == [("all_gather", "bwd"), ("reduce_scatter", "bwd")]
    full = torch.cat([shard, shard], 0).detach()
    assert torch.allclose(w.grad, gy.t() @ full, atol=1e-5)
    assert torch.allclose(shard.grad, 2 * (gy @ w.detach())[:3], atol=1e-5)
    frozen = Linear(torch.randn(6, 4), None, WeightGradStore())
    frozen.weight.requires_grad_(False)
    tp2 = _TwoIdenticalRanks()
    frozen.gathered(torch.randn(3, 4, requires_grad=True), tp2).sum().backward()
    assert tp2.calls == [("all_gather", "fwd"), ("reduce_scatter", "bwd")]
