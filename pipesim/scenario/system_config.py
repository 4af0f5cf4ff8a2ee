"""The system part of a scenario: the GPU, its links, the cluster's shape and heterogeneity (frozen,
keyword-only dataclasses in SI units; pipesim/scenario/config.py assembles the scenario)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pipesim.scenario.schema import field
from pipesim.scenario.units import GBps, GiB, TFLOPS, US


def matrix_peak_of(peaks: dict, precision: str) -> float:
    """Dense matrix peak for `precision` from `peaks` by dtype (fp16, bf16, fp32, tf32, fp8, fp4;
    None where the GPU has none): a dtype without tensor cores of its own runs at the next wider
    one's rate; fp32 math uses the FP32 peak, not TF32."""
    p = peaks.get
    table = {"fp16": p("fp16"), "bf16": p("bf16") or p("fp16"), "fp32": p("fp32"), "tf32": p("tf32") or p("fp32"),
             "fp8": p("fp8") or p("bf16") or p("fp16"), "fp4": p("fp4") or p("fp8") or p("bf16") or p("fp16")}
    return table[precision]


@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    name: str = field("gpu")
    peak_fp16: float = field(key="peak_tflops_fp16", scale=TFLOPS, doc="tensor-core FP16 dense peak, TFLOP/s")
    peak_bf16: Optional[float] = field(None, key="peak_tflops_bf16", scale=TFLOPS, doc="BF16 matrix peak")
    peak_fp32: float = field(key="peak_tflops_fp32", scale=TFLOPS, doc="FP32 (non-TF32) peak, TFLOP/s")
    peak_tf32: Optional[float] = field(None, key="peak_tflops_tf32", scale=TFLOPS, doc="TF32 matrix peak")
    peak_fp8: Optional[float] = field(None, key="peak_tflops_fp8", scale=TFLOPS, doc="FP8 matrix peak")
    peak_fp4: Optional[float] = field(None, key="peak_tflops_fp4", scale=TFLOPS, doc="FP4 matrix peak (Blackwell)")
    vector_fp32: Optional[float] = field(None, key="vector_tflops_fp32", scale=TFLOPS, doc="FP32 elementwise peak")
    vector_fp16: Optional[float] = field(None, key="vector_tflops_fp16", scale=TFLOPS, doc="FP16 elementwise peak")
    hbm_bandwidth: float = field(key="hbm_bandwidth_GBps", scale=GBps, doc="device memory bandwidth, GB/s")
    memory: float = field(key="memory_GiB", scale=GiB, doc="device memory, GiB")
    kernel_launch: float = field(0.0, key="kernel_launch_us", scale=US,
                                 doc="fixed host cost per launched kernel / eager op, microseconds")
    launch_overlaps: bool = field(True, doc="launches are asynchronous (GPU): an op takes max(kernel, "
                                            "launch); false for synchronous hosts (CPU eager): kernel + launch")
    kernel_curve: Optional[str] = field(None, doc="published kernel curves of this GPU (pipesim/presets/gpus.py: "
                                                  "a100, h100, h800, h200, b200, gb200, b300, gb300, v100)")
    matmul_efficiency: Optional[float] = field(None, doc="explicit override: a flat achievable fraction of "
                                                        "matrix peak for every matmul instead of the kernel curves")
    sustained_ratio: Optional[float] = field(None, doc="tensor-core rate a training step sustains at the "
                                                      "power limit, as a fraction of the kernel curves' burst "
                                                      "rate (default: the curve's measured MSMF / MAMF; 1 = "
                                                      "clocks held at boost)")
    vector_efficiency: float = field(0.8, doc="achievable fraction of vector peak")
    memory_efficiency: float = field(0.85, doc="achievable fraction of HBM bandwidth")

    def __post_init__(self):
        for name in ("matmul_efficiency", "sustained_ratio", "vector_efficiency", "memory_efficiency"):
            v = getattr(self, name)
            if v is not None and not 0 < v <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {v}")
        for name in ("peak_fp16", "peak_fp32", "hbm_bandwidth", "memory"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        # the optional peaks: absent means "runs at the next wider dtype's rate" (matrix_peak_of);
        # given, a zero or negative one would be silently replaced or scale the kernel curves below 0
        for name, key in (("peak_bf16", "peak_tflops_bf16"), ("peak_tf32", "peak_tflops_tf32"),
                          ("peak_fp8", "peak_tflops_fp8"), ("peak_fp4", "peak_tflops_fp4"),
                          ("vector_fp32", "vector_tflops_fp32"), ("vector_fp16", "vector_tflops_fp16")):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ValueError(f"{key} must be positive (or left out), got {v / 1e12:g}")

    def matrix_peak(self, precision: str) -> float:
        """Dense matrix FLOP/s for `precision` (fp32 math uses the FP32 peak, not TF32)."""
        return matrix_peak_of({"fp16": self.peak_fp16, "bf16": self.peak_bf16, "fp32": self.peak_fp32,
                               "tf32": self.peak_tf32, "fp8": self.peak_fp8, "fp4": self.peak_fp4}, precision)

    def vector_peak(self, precision: str) -> float:
        fp32 = self.vector_fp32 or self.peak_fp32
        if precision in ("fp32", "tf32"):
            return fp32
        return self.vector_fp16 or fp32


@dataclass(frozen=True, kw_only=True)
class LinkSpec:
    bandwidth: float = field(key="bandwidth_GBps", scale=GBps, doc="per GPU, per direction, GB/s")
    latency: float = field(0.0, key="latency_us", scale=US, doc="per message, microseconds")
    efficiency: float = field(0.8, doc="achievable fraction of the bandwidth")
    nvls: Optional[float] = field(None, key="nvls_GBps", scale=GBps,
                                  doc="intra_node: the all-reduce bus bandwidth of NVLink SHARP (NCCL's NVLS "
                                      "algorithm, the reduction done in the NVSwitch) measured over a whole node of "
                                      "8, GB/s; null: no NVLS (an NVSwitch without SHARP, NCCL_NVLS_ENABLE=0)")

    def __post_init__(self):
        if self.bandwidth <= 0:
            raise ValueError("bandwidth_GBps must be positive")
        if self.nvls is not None and self.nvls <= 0:
            raise ValueError(f"nvls_GBps must be positive, got {self.nvls / GBps:g}")
        if self.latency < 0:
            raise ValueError("latency_us must not be negative")
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency must be in (0, 1], got {self.efficiency}")

    @property
    def effective_bandwidth(self) -> float:
        return self.bandwidth * self.efficiency


@dataclass(frozen=True, kw_only=True)
class Heterogeneity:
    rank_speed: dict[int, float] = field(default_factory=dict,
                                         doc="global rank -> compute speed factor (0.5 = half as fast)")
    node_inter_bandwidth: dict[int, float] = field(default_factory=dict, key="node_inter_bandwidth_GBps", scale=GBps,
                                                   doc="node -> inter-node bandwidth override, GB/s")

    def __post_init__(self):
        for rank, s in self.rank_speed.items():
            if s <= 0:
                raise ValueError(f"rank_speed[{rank}] must be positive, got {s}")


@dataclass(frozen=True, kw_only=True)
class SystemConfig:
    name: str = field("custom")
    num_nodes: int = field(1, doc="nodes")
    gpus_per_node: int = field(8, doc="GPUs per node (tray / server)")
    nvlink_domain: Optional[int] = field(None, doc="GPUs sharing one NVLink fabric (default: a node); "
                                                   "NVL72 racks: 72 GPUs spanning 18 trays")
    gpu: GPUSpec = field(doc="the GPU")
    intra_node: LinkSpec = field(doc="link between GPUs of a node")
    inter_node: LinkSpec = field(doc="link between nodes (per GPU)")
    heterogeneity: Heterogeneity = field(default_factory=Heterogeneity, doc="stragglers, slow links")
    host_link_GBps: Optional[float] = field(None, doc="measured GPU <-> host-memory copy rate per GPU and "
                                                      "direction, GB/s (activation offloading; presets cite it)")
    node_power_kW: Optional[float] = field(None, doc="a node's maximum input power, kW (the run's energy; DGX "
                                                     "presets cite their user guides)")
    pod_gpus: Optional[int] = field(None, doc="GPUs of one full-bisection network pod; pods are joined by an "
                                              "oversubscribed layer (Llama 3's cluster: 3072, Dubey et al. 2024 "
                                              "Sec. 3.3.1); null = one full-bisection network")
    pod_oversubscription: float = field(1.0, doc="a pod's NIC capacity over its capacity toward the other pods "
                                                 "(Llama 3's aggregation layer: 7); 1 = full bisection")

    def __post_init__(self):
        if self.num_nodes < 1 or self.gpus_per_node < 1:
            raise ValueError("num_nodes and gpus_per_node must be at least 1")
        if self.host_link_GBps is not None and self.host_link_GBps <= 0:
            raise ValueError(f"host_link_GBps must be positive, got {self.host_link_GBps}")
        if self.node_power_kW is not None and self.node_power_kW <= 0:
            raise ValueError(f"node_power_kW must be positive, got {self.node_power_kW}")
        if self.inter_node.nvls is not None:
            raise ValueError("inter_node.nvls_GBps: NVLink SHARP is the NVSwitch's, give it on intra_node")
        if self.pod_oversubscription < 1:
            raise ValueError(f"pod_oversubscription must be at least 1 (1 = full bisection), got "
                             f"{self.pod_oversubscription}")
        if self.pod_gpus is not None and (self.pod_gpus < 1 or self.pod_gpus % self.gpus_per_node):
            raise ValueError(f"pod_gpus must be a positive multiple of gpus_per_node({self.gpus_per_node}), "
                             f"got {self.pod_gpus}")
        d = self.nvlink_domain
        if d is not None:
            n = self.num_nodes * self.gpus_per_node
            if d < 1 or d % self.gpus_per_node or (n >= d and n % d):
                g = self.gpus_per_node
                fits = [k for k in range(g, min(d, n) + 1, g) if n % k == 0]
                hint = (f"; e.g. nvlink_domain {fits[-1]} (racks with {fits[-1] // g} of their trays in use) or "
                        f"a multiple of {d} GPUs" if fits and d >= g and d % g == 0 else "")
                raise ValueError(f"nvlink_domain must be a multiple of gpus_per_node that divides the GPU count: "
                                 f"nvlink_domain {d}, gpus_per_node {g}, num_nodes({self.num_nodes})"
                                 f"·gpus_per_node({g}) = {n} GPUs{hint}")

    @property
    def island(self) -> int:
        """GPUs reachable over NVLink from one GPU (a node unless the NVLink domain spans trays)."""
        return min(self.nvlink_domain or self.gpus_per_node, self.num_gpus)

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node
