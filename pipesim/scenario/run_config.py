"""The `run` section: the whole training run around one step (pipesim/report/goodput.py).

Its defaults are published fleet figures; each is a property of a cluster and its software, so a
planner with their own numbers should set them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pipesim.scenario.schema import field
from pipesim.scenario.units import MINUTE, GBps

# Llama 3 405B pre-training on 16,384 H100: 419 unexpected interruptions in a 54-day snapshot
# (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, Sec. 3.3.4 and Table 5;
# the 47 planned ones are left out), i.e. 419 / (54 x 16,384) x 1000 per 1000 GPU-days.
LLAMA3_INTERRUPTIONS_PER_1000_GPU_DAYS = 419 / (54 * 16384) * 1000
# The same cluster's checkpoint storage: Tectonic, "a sustainable throughput of 2 TB/s and a peak
# throughput of 7 TB/s" (ibid., Sec. 3.3.1 "Storage"), shared by the job's 2,048 eight-GPU nodes.
LLAMA3_STORAGE_GBps_PER_NODE = 2000 / 2048


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """SI units inside (seconds, bytes/s); the file keys carry theirs."""
    tokens: Optional[float] = field(None, doc="tokens the whole run trains on (e.g. 15e12); null = no run "
                                              "estimate")
    interruptions_per_1000_gpu_days: float = field(
        LLAMA3_INTERRUPTIONS_PER_1000_GPU_DAYS, doc="unexpected job interruptions per 1000 GPU-days "
        "(default: Llama 3 405B's 419 in 54 days on 16,384 H100, 0.474)")
    restart: float = field(10 * MINUTE, key="restart_min", scale=MINUTE, doc="minutes from an interruption until "
                           "the job runs again, before it reads its checkpoint: detection, replacing the node, "
                           "rescheduling, process and NCCL start-up (default 10: an assumption, no published "
                           "figure for a plain restart; FlashRecovery, arXiv 2509.03047, reports 150 s on 4,800 "
                           "devices with its optimised one)")
    checkpoint_write: float = field(LLAMA3_STORAGE_GBps_PER_NODE * GBps, key="checkpoint_write_GBps_per_node",
                                    scale=GBps, doc="checkpoint write rate of each node to storage, GB/s "
                                                    "(default: Llama 3's 2 TB/s storage over 2,048 nodes, 0.98)")
    checkpoint_read: Optional[float] = field(None, key="checkpoint_read_GBps_per_node", scale=GBps,
                                             doc="checkpoint read rate per node, GB/s (default: the write rate)")
    checkpoint_interval: Optional[float] = field(None, key="checkpoint_interval_min", scale=MINUTE,
                                                 doc="minutes of training between checkpoints; null = the "
                                                     "interval that minimises the expected wall-clock time")
    async_checkpoint: bool = field(True, doc="the step blocks only while the checkpoint is copied to host memory "
                                             "and the write continues in the background (Megatron --async-save, "
                                             "torch.distributed.checkpoint.async_save); false: the step waits "
                                             "for the write")
    gpu_hour_usd: Optional[float] = field(None, doc="price of one GPU-hour, for the run's cost")

    def __post_init__(self):
        if self.tokens is not None and self.tokens <= 0:
            raise ValueError(f"tokens must be positive, got {self.tokens:g}")
        file_value = {"interruptions_per_1000_gpu_days": (self.interruptions_per_1000_gpu_days, 1.0),
                      "restart_min": (self.restart, MINUTE), "gpu_hour_usd": (self.gpu_hour_usd, 1.0)}
        for key, (value, scale) in file_value.items():
            if value is not None and value < 0:
                raise ValueError(f"{key} must not be negative, got {value / scale:g}")
        rates = {"checkpoint_write_GBps_per_node": (self.checkpoint_write, GBps),
                 "checkpoint_read_GBps_per_node": (self.checkpoint_read, GBps),
                 "checkpoint_interval_min": (self.checkpoint_interval, MINUTE)}
        for key, (value, scale) in rates.items():
            if value is not None and value <= 0:
                raise ValueError(f"{key} must be positive, got {value / scale:g}")
