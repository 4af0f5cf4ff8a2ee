"""Where pipeline stages run: GPU slots on nodes and the links between them.

Slot g is the g-th pipeline GPU (or tensor-parallel group of `slot_width` GPUs), filled node by
node. Two slots on one node talk over the intra-node link (NVLink/PCIe), otherwise over the
inter-node link; the model's input arrives and its output leaves over the intra-node link (host
to device over PCIe on the seeds' boxes).
"""
from __future__ import annotations

from dataclasses import dataclass

from pipesim.costs.collectives import Link, p2p_time
from pipesim.errors import ScenarioError
from pipesim.scenario.system_config import GPUSpec, SystemConfig


@dataclass(frozen=True)
class Cluster:
    gpu: GPUSpec
    gpus_per_node: int
    num_gpus: int
    intra: Link
    inter: Link
    slot_width: int = 1              # GPUs per pipeline stage (tensor-parallel group)
    name: str = "system"
    gpu_speed: tuple = ()            # (global GPU rank, speed factor) pairs; others run at 1.0

    def speed(self, slot: int) -> float:
        """Compute speed of a slot: its slowest GPU (a tensor-parallel group waits for it)."""
        table = dict(self.gpu_speed)
        return min(table.get(slot * self.slot_width + r, 1.0) for r in range(self.slot_width))

    @property
    def heterogeneous(self) -> bool:
        return any(v != 1.0 for _, v in self.gpu_speed)

    @property
    def slots(self) -> int:
        return self.num_gpus // self.slot_width

    def node_of(self, slot: int) -> int:
        return slot * self.slot_width // self.gpus_per_node

    def link(self, a: int | None, b: int | None) -> Link:
        """Link between slots a and b; None stands for the host (model input/output)."""
        if a is None or b is None or self.node_of(a) == self.node_of(b):
            return self.intra
        return self.inter

    def transfer(self, nbytes: float, a: int | None, b: int | None) -> float:
        return p2p_time(nbytes, self.link(a, b))


def cluster_from_system(system: SystemConfig, slot_width: int = 1) -> Cluster:
    # Effective bandwidth = nominal x achievable fraction (preset efficiencies, nccl-tests style).
    intra = Link(system.intra_node.effective_bandwidth, system.intra_node.latency)
    inter = Link(system.inter_node.effective_bandwidth, system.inter_node.latency)
    speed = tuple(sorted(system.heterogeneity.rank_speed.items()))
    return Cluster(gpu=system.gpu, gpus_per_node=system.gpus_per_node, num_gpus=system.num_gpus,
                   intra=intra, inter=inter, slot_width=slot_width, name=system.name, gpu_speed=speed)


def load_system(preset: str, overrides: dict | None = None) -> SystemConfig:
    """A SystemConfig from a preset name of pipesim/presets/systems.py (plus field overrides)."""
    from pipesim.presets.systems import SYSTEMS
    from pipesim.scenario.schema import Loader, merge
    if preset not in SYSTEMS:
        raise ScenarioError(f"--system {preset}: unknown system preset; known: {', '.join(sorted(SYSTEMS))}")
    raw = merge(dict(SYSTEMS[preset], name=preset), overrides or {})
    return Loader(f"system preset {preset}").build(SystemConfig, raw, "system")
