"""Blocking, batched pipeline point-to-point (training.p2p_sync): the engine's exchange of one
comm batch.

Megatron-LM batches the sends and receives a pipeline rank issues between two computes into one
`torch.distributed.batch_isend_irecv` call, waits on every request and then calls
`torch.cuda.synchronize()` (megatron/p2p_communication.py `_communicate`, 2021, "To protect against
race condition when using batch_isend_irecv()"; Megatron-Core keeps it as `batch_p2p_comm` +
`batch_p2p_sync`, both default True, the only mode of the non-interleaved 1F1B schedule:
megatron/core/pipeline_parallel/p2p_communication.py, model_parallel_config.py r0.8). With NCCL
a send moves no byte before the receiver has launched the matching receive, so:

- a batch is a maximal run of SEND/RECV steps between two computes of a rank's lowered plan;
- at the batch's start every receive in it is posted (Megatron-Core's 1F1B: the exchange after a
  forward receives the next backward's input); under the interleaved schedule the steady phase's
  row is first rearranged into Megatron's combined exchanges (`combined_exchanges`);
- each send waits for its receiver to post the matching receive (the peer reaching its own batch),
  then holds the sender's port for its wire time;
- the rank's compute stream resumes when every send of the batch has finished and every receive
  has arrived.

Posting all receives before any send waits keeps two matched batches ({send a, recv b} against
{recv a, send b}) free of deadlock, as NCCL's grouped launch does. Asynchronous P2P (the default,
and Megatron's interleaved schedule with --overlap-p2p-communication) lets a send leave at once
and the sender compute on (sim/engine.py)."""
from __future__ import annotations

from heapq import heappush

from pipesim.sim.driver import NORMAL
from pipesim.sim.workload import STEP_COMPUTE, Step


def comm_batches(steps) -> tuple[set, dict]:
    """(index past the end of each maximal run of SEND/RECV steps, {first index of a run: the
    receive keys posted when the rank reaches it}): a run posts its own receives."""
    runs, start = [], None
    for i, op in enumerate(steps):
        if op.code == STEP_COMPUTE:
            if start is not None:
                runs.append((start, i))
            start = None
        elif start is None:
            start = i
    if start is not None:
        runs.append((start, len(steps)))
    posts = {a: tuple(op.rkey for op in steps[a:b] if _is_recv(op)) for a, b in runs}
    return {b for _, b in runs}, posts


def has_steady_exchanges(plan) -> bool:
    """Whether the plan is Megatron's interleaved schedule with a steady phase (V > 1 and
    M != P; with M == P every forward runs first, each exchange on its own)."""
    return plan.num_stages > plan.num_ranks and plan.num_microbatches != plan.num_ranks


def combined_exchanges(steps) -> tuple:
    """The row of Megatron's interleaved 1F1B as its blocking code runs it: in the steady phase a
    forward and a backward run back to back, then ONE exchange sends both outputs and receives
    the inputs of the next forward and the next backward (`send_forward_backward_recv_forward_
    backward` after `forward_step_helper(k)` and `backward_step_helper(k)`, megatron/schedules.py
    forward_backward_pipelining_with_interleaving, 2021-22). The lowered row sends a forward's
    output right after it and receives a backward's input right before it; for every forward
    followed by a backward, the comm steps between them move: the receives into the exchange
    before the forward, the sends into the one after the backward. A forward's output thus
    leaves only after the paired backward, and the next pair starts only when the neighbours'
    outputs for both have arrived."""
    items, run = [], []          # comm run, compute, comm run, compute, ..., comm run
    for op in steps:
        if op.code == STEP_COMPUTE:
            items += [run, op]
            run = []
        else:
            run.append(op)
    items.append(run)
    for i in range(1, len(items) - 2, 2):
        if items[i].kind == "F" and items[i + 2].kind == "B" and items[i + 1]:
            between = items[i + 1]
            items[i - 1] = items[i - 1] + [op for op in between if _is_recv(op)]
            items[i + 3] = [op for op in between if not _is_recv(op)] + items[i + 3]
            items[i + 1] = []
    out = []
    for i, x in enumerate(items):
        if i % 2:
            out.append(x)
        else:
            out += x
    return tuple(out)


def post_receives(engine, gid: int, keys) -> None:
    """Post receives `keys` of rank `gid`: a sender already waiting for one is woken now."""
    env, posted = engine.env, engine.posted[gid]
    now = env._now
    for rkey in keys:
        waiter = posted.pop(rkey, None)
        if waiter is None:
            posted[rkey] = now
        else:
            waiter._value = now
            heappush(env._queue, (now, NORMAL, next(env._eid), waiter))


def wait_receiver(engine, dst: int, rkey, timer, armed):
    """Generator: until rank `dst` has posted the receive `rkey` (its batch has started)."""
    posted = engine.posted[dst]
    if posted.pop(rkey, None) is None:          # not posted yet: the receiver wakes `timer`
        timer.callbacks = armed
        posted[rkey] = timer
        yield None


def sends_first(steps) -> tuple:
    """The row with each comm batch's sends ahead of its receives: one batch is posted at once
    (NCCL's grouped launch), so the order inside it carries no meaning, and a rank must not
    block on a receive before issuing a send its peer may be waiting for."""
    out, run = [], []
    for op in steps:
        if op.code == STEP_COMPUTE:
            out += sorted(run, key=_is_recv)
            run = []
            out.append(op)
        else:
            run.append(op)
    out += sorted(run, key=_is_recv)
    return tuple(out)


def _is_recv(op) -> bool:
    return op.kind.startswith("RECV")


def wait_sends(env, sent_end: float, wire: float, recv_log: list, timer, armed):
    """Generator: the end of a batch, where the compute stream waits for the batch's sends
    (req.wait() + torch.cuda.synchronize()). The wait is logged like a receive's, so the time the
    rank sat blocked while its own send was on the wire counts as exposed P2P; returns 0.0 (the
    next batch's sends start afresh)."""
    now = env._now
    if sent_end > now:
        recv_log.append((now, sent_end, wire, "SEND_WAIT"))
        timer.callbacks = armed
        heappush(env._queue, (sent_end, NORMAL, next(env._eid), timer))
        yield None
    return 0.0


POST, WAIT = 3, 4       # pseudo-step codes of `dag_steps` (beside workload.STEP_COMPUTE/SEND/RECV)


def _pseudo(code: int, keys: tuple = ()) -> Step:
    return tuple.__new__(Step, (code, 0, "POST" if code == POST else "WAIT", -1, False, keys, -1, -1, False, False))


def batched_row(steps, plan) -> tuple:
    """A rank's lowered row as blocking P2P runs it, for the engine and the DAG pass alike:
    Megatron's combined exchanges where the plan has an interleaved steady phase, and each
    batch's sends ahead of its receives."""
    return sends_first(combined_exchanges(steps) if has_steady_exchanges(plan) else steps)


def dag_steps(ops) -> tuple:
    """The row as the DAG pass walks it under p2p_sync (sim/dag.py): `ops` as `batched_row`
    orders it, with a POST step (rkey: the receive keys to post) where the engine posts them, and
    a WAIT step after every batch that sends, where the engine's rank waits for its sends
    (Engine.rank)."""
    ends, posts = comm_batches(ops)
    out = []
    sending = False
    for i, op in enumerate(ops):
        if i in ends and sending:
            out.append(_pseudo(WAIT))
            sending = False
        if posts.get(i):
            out.append(_pseudo(POST, posts[i]))
        out.append(op)
        sending = sending or op.kind.startswith("SEND")
    if sending:
        out.append(_pseudo(WAIT))
    return tuple(out)
