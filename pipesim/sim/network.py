"""Network on the SimPy timeline: ports, point-to-point messages and collectives.

Contention model. Every simulated GPU gang has one egress *port* per link class (`intra`:
NVLink/PCIe, `inter`: its NIC). A port is a capacity-1 FIFO server whose hold times are known
when a request is made (α-β times), so it is kept as its reservation horizon `free_at`: a request
at time t is served over [max(t, free_at), +d). That is exactly the schedule a SimPy
`Resource(capacity=1)` would produce for the same requests (tests/test_sim_network.py checks it
against one) at one event per transfer instead of four. Concurrent collectives through one NIC
therefore queue and each gets the full bandwidth in turn: aggregate throughput equals fair
sharing (the last of k simultaneous transfers ends when it would under a fluid model); only the
order in which the earlier ones finish differs. Point-to-point messages (pipeline activations and
gradients) queue among themselves and share the port with the collectives instead of waiting
behind them (`Port.send`): queued behind a data-parallel bucket of 100 ms, a 2 ms pipeline send
held its receiver up for the whole bucket, and a change that made the buckets shorter could
lengthen the step (benchmarks/metamorphic_audit.py). Ingress is not modelled (pipeline neighbours send
on distinct links). A collective reserves every member's port at once, from the latest
horizon among them, so it neither holds a port while waiting for another nor deadlocks.

Delivery: a message is posted to the receiving rank's mailbox under (RECV kind, stage,
micro-batch) with its wire interval; a RECV that arrives first leaves an event there that the
sender schedules to fire when the last byte lands (a keyed Store with one slot per message: no
FilterStore scan).

Collectives wait for all members (a counting barrier: AllOf's semantics without an event per
member); the last member to arrive runs the network phase, the others wait on its done event.
"""
from __future__ import annotations

from operator import attrgetter


class Port:
    """FIFO capacity-1 server with known hold times (see module docstring), shared with point-to-
    point messages (`send`)."""
    __slots__ = ("free_at", "p2p_at")

    def __init__(self):
        self.free_at = 0.0      # when the collectives queued on the port are done
        self.p2p_at = 0.0       # when the point-to-point messages queued on it are done

    def reserve(self, now: float, dur: float) -> tuple[float, float]:
        start = now if now > self.free_at else self.free_at
        end = start + dur
        self.free_at = end
        return start, end

    def send(self, now: float, dur: float) -> tuple[float, float]:
        """A point-to-point message of `dur` seconds at full bandwidth. Messages queue behind one
        another, not behind the collectives queued on the port: a pipeline activation and a
        data-parallel bucket run on different NCCL communicators at once, and the NIC shares its
        bandwidth between them. So the message shares it equally with the collective backlog B
        it meets (fluid sharing of two flows: it ends after min(2 dur, B + dur)), and the
        backlog ends dur later; on an idle port it runs alone and holds off the next collective
        (a collective arriving then queues behind it, as before)."""
        start = now if now > self.p2p_at else self.p2p_at
        backlog = self.free_at - start
        if backlog > 0:
            end = start + (2 * dur if dur < backlog else backlog + dur)
            self.free_at += dur
        else:
            end = self.free_at = start + dur
        self.p2p_at = end
        return start, end


_FREE_AT = attrgetter("free_at")


def reserve_all(ports, now: float, dur: float) -> tuple[float, float]:
    start = max(now, max(map(_FREE_AT, ports)))
    end = start + dur
    for p in ports:
        p.free_at = end
    return start, end


class Barrier:
    __slots__ = ("arrived", "done", "data")

    def __init__(self, env):
        self.arrived = 0
        self.done = env.event()
        self.data = []


class Network:
    def __init__(self, env, num_gangs: int):
        self.env = env
        self.ports = [{"intra": Port(), "inter": Port()} for _ in range(num_gangs)]
        self.boxes: list[dict] = [{} for _ in range(num_gangs)]   # per rank: message key -> posted / waiting
        self.barriers: dict = {}

    def arrive(self, key, n: int, item=None) -> tuple[Barrier, bool]:
        """Join barrier `key` of `n` members; returns (barrier, True if this member is the last)."""
        b = self.barriers.get(key)
        if b is None:
            b = self.barriers[key] = Barrier(self.env)
        b.arrived += 1
        if item is not None:
            b.data.append(item)
        if b.arrived == n:
            del self.barriers[key]
            return b, True
        return b, False
