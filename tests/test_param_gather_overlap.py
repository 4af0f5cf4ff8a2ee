"""How much of the ZeRO-1/2 parameter all-gather the next step's forwards hide, chunk by chunk as
Megatron-Core issues it (pipesim/costs/param_gather.py).

Before: with virtual stages, every chunk's gather had to hide under one micro-batch's forward over
the rank's chunks. Megatron issues chunk k+1's gather when chunk k runs its first micro-batch, so
it has a micro-batch group of chunk k's forwards (P by default) to run under. GPT-3 175B on 8,192
H100 (MLPerf v3.1, P 8, V 12) had 211 ms of its 1.68 s step exposed to the gather; 53 ms now."""
import pytest

import pipesim
from pipesim.costs.param_gather import exposed_param_gather, first_forwards
from pipesim.schedules import generate
from pipesim.schedules.actions import Action
from pipesim.sim.dp_time import param_gather_exposed, param_gather_seconds
from pipesim.sim.workload import build


def test_one_chunk_hides_what_its_forward_lasts_but_its_first_bucket():
    # bucket j of n is gathered at (j+1)/n of the gather and needed at j/n of the forward
    assert exposed_param_gather([(10.0, 0.0, 4.0, 5)]) == pytest.approx(10.0 - 4.0 * 4 / 5)
    assert exposed_param_gather([(3.0, 0.0, 4.0, 3)]) == pytest.approx(1.0)       # the first bucket
    assert exposed_param_gather([(3.0, 0.0, 4.0, 1)]) == pytest.approx(3.0)       # one bucket: all of it
    assert exposed_param_gather([(3.0, 0.0, 4.0, 10 ** 9)]) == pytest.approx(0.0, abs=1e-6)


def test_interleaved_chunks_gather_under_the_previous_chunks_group_of_forwards():
    # 3 chunks of 2 buckets, gathers of 10, forwards of 2, a group of 4 micro-batches per chunk:
    # first forwards at 0, 8, 16; a chunk holds the compute up by max(10/2, 10 - 2/2) = 9 past the
    # start of its gather. Chunk 0 waits 9; chunk 1 (issued at 0) begins at 10: 10 + 9 - 8, 2
    # more; chunk 2, issued as chunk 1 starts (8 + 9), begins at 20: 20 + 9 - 16, 2 more.
    chunks = [(10.0, 0.0, 2.0, 2), (10.0, 8.0, 2.0, 2), (10.0, 16.0, 2.0, 2)]
    assert exposed_param_gather(chunks) == pytest.approx(13.0)
    # every gather under one forward of each chunk (the model before) would expose about 30 - 6
    assert exposed_param_gather([(30.0, 0.0, 6.0, 6)]) == pytest.approx(25.0)


def test_a_later_chunk_is_not_gathered_before_the_chunk_ahead_of_it_starts():
    # chunk 2 is issued when chunk 1 starts (at 1), not at the step's start
    chunks = [(0.0, 0.0, 1.0, 1), (0.0, 1.0, 1.0, 1), (10.0, 2.0, 1.0, 1)]
    assert exposed_param_gather(chunks) == pytest.approx(9.0)


class _Costs:
    def __init__(self, forward, backward):
        self.forward, self.backward = forward, backward
        self.input_grad = self.weight_grad = backward / 2
        self.recompute = 0.0


def test_first_forwards_read_off_an_interleaved_plan():
    plan = generate("interleaved", 4, 8, virtual=2)
    costs = [_Costs(1.0 + s, 3.0) for s in range(8)]
    # rank 1 holds stages 1 and 5; its warm-up runs 4 forwards of stage 1 before stage 5's first
    assert first_forwards(plan.ranks[1], costs) == ((1, 0.0, 2.0), (5, 8.0, 6.0))
    # at half speed every time doubles
    assert first_forwards(plan.ranks[1], costs, 0.5) == ((1, 0.0, 4.0), (5, 16.0, 12.0))
    assert first_forwards([Action(0, "B", 0), Action(0, "F", 1)], costs) == ((0, 3.0, 1.0),)


GPT = {"model": {"preset": "gpt3-175b", "num_layers": 48},
       "system": {"preset": "dgx-h100", "num_nodes": 32},
       "parallel": {"tensor": 4, "pipeline": 8, "data": 8, "virtual_stages": 6, "sequence_parallel": True},
       "training": {"micro_batch_size": 1, "global_batch_size": 64, "schedule": "interleaved",
                    "zero_stage": 1, "overlap_grad_reduce": True, "overlap_param_gather": True,
                    "grad_reduce_in_fp32": False, "grad_bucket_MB": 100.0}}


def test_the_step_waits_for_what_the_chunk_by_chunk_gather_leaves_exposed():
    s = pipesim.load_scenario(GPT)
    w = build(s)
    g = w.gangs[0]
    total = param_gather_seconds(w, w.plan.stages_of(0), 0)
    exposed = param_gather_exposed(w, g)
    one_forward = sum(f for _, _, f in g.first_forwards)   # the model before
    assert 0.0 < exposed < total - one_forward
    rep = pipesim.simulate(s, trace=False)
    assert rep.data["exposed_comm_s"]["ZERO_ALLGATHER"] == pytest.approx(
        max(param_gather_exposed(w, h) for h in w.gangs), rel=1e-9)
    # without the overlap the whole gather waits
    off = build(pipesim.load_scenario(GPT, overrides=["training.overlap_param_gather=false"]))
    assert param_gather_exposed(off, off.gangs[0]) == pytest.approx(total)


def test_the_closed_form_agrees_with_the_engine_on_an_interleaved_rank():
    """whatif/analytic.py counts the interleaved warm-up's group of forwards per chunk as the plan
    does, so with uniform chunks both give rank 0 the same exposed gather."""
    from pipesim.whatif.analytic import first_forward_starts, rank_chunks
    from pipesim.costs import stage_costs
    s = pipesim.load_scenario(GPT)
    w = build(s)
    chunks = rank_chunks(s, stage_costs(s))[0]
    starts, forwards = first_forward_starts(s, chunks)
    flat = [x for c, t, f in zip(chunks, starts, forwards) for x in (c.stage, t, f)]
    assert flat == pytest.approx([x for chunk in w.gangs[0].first_forwards for x in chunk])
