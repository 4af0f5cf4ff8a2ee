"""The port model equals a SimPy Resource(capacity=1) for holds of known length."""
import simpy
from hypothesis import given, settings, strategies as st

from pipesim.sim.network import Port, reserve_all

requests = st.lists(st.tuples(st.floats(0, 10), st.floats(0, 3)), min_size=1, max_size=30)


def resource_schedule(reqs):
    env = simpy.Environment()
    res = simpy.Resource(env, capacity=1)
    out = [None] * len(reqs)

    def user(i, t, d):
        yield env.timeout(t)
        with res.request() as r:
            yield r
            start = env.now
            yield env.timeout(d)
            out[i] = (start, env.now)

    for i, (t, d) in enumerate(reqs):
        env.process(user(i, t, d))
    env.run()
    return out


@settings(max_examples=200, deadline=None, derandomize=True)
@given(requests)
def test_port_matches_simpy_resource(reqs):
    port = Port()
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i][0], i))
    mine = [None] * len(reqs)
    for i in order:
        mine[i] = port.reserve(*reqs[i])
    assert mine == resource_schedule(reqs)


def test_collective_reserves_all_ports_from_the_latest_horizon():
    a, b = Port(), Port()
    a.reserve(0.0, 2.0)                       # a busy until 2
    assert reserve_all([a, b], 1.0, 1.0) == (2.0, 3.0)
    assert (a.free_at, b.free_at) == (3.0, 3.0)
    assert b.reserve(1.5, 1.0) == (3.0, 4.0)  # FIFO: a later request waits for the collective


def test_a_message_shares_the_port_with_a_queued_collective_instead_of_waiting_behind_it():
    """A 2 s pipeline send meeting 10 s of queued data-parallel buckets: before, it waited for all
    of them (FIFO); now the two flows share the link: the send ends after 4 s, the buckets 2 s late."""
    from pipesim.sim.network import Port
    p = Port()
    p.reserve(0.0, 10.0)
    assert p.send(1.0, 2.0) == (1.0, 5.0)
    assert p.free_at == 12.0
    # messages queue among themselves: the next one starts when this one ends; the backlog it
    # meets (7 s) is longer than twice its own 1 s
    assert p.send(2.0, 1.0) == (5.0, 7.0)
    assert p.free_at == 13.0
    # a message longer than the backlog it meets: shared while the backlog lasts, then alone
    q = Port()
    q.reserve(0.0, 1.0)
    assert q.send(0.0, 3.0) == (0.0, 4.0)
    assert q.free_at == 4.0
    # on an idle port a message runs alone, and a collective arriving meanwhile queues behind it
    r = Port()
    assert r.send(1.0, 2.0) == (1.0, 3.0)
    assert r.reserve(2.0, 1.0) == (3.0, 4.0)
