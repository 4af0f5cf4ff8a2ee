"""System presets, in scenario-file keys (units in key names). Every number cites its source.

peak_tflops_<p>: the matrix (tensor-core) dense peak for precision p; fp32 = plain FP32 FMA peak
(TF32 has its own key). vector_tflops_<p>: elementwise (non-tensor-core) peaks.
Bandwidths are per GPU, per direction. Efficiencies are the achievable fractions of peak that
pipesim assumes by default (documented in docs/COSTS.md); they can be overridden per scenario.
"""
from functools import lru_cache


# Default achievable fractions. Matmuls and attention have no scalar: they follow the per-GPU
# kernel curves named by `kernel_curve` (pipesim/presets/gpus.py, from published kernel
# benchmarks); `matmul_efficiency` stays available as an explicit user override only.
# memory: STREAM-like copies reach ~85-90 % of HBM peak (McCalpin STREAM; NVIDIA nvbandwidth /
# BabelStream results on A100/H100 reach 85-92 %), so 0.85.
# NVLink: NCCL bus bandwidth reaches ~80 % of the NVLink line rate (nccl-tests PERFORMANCE.md
# busbw; e.g. ~230 of 300 GB/s per direction on DGX A100).
# kernel_launch_us: fixed cost per launched kernel; CUDA launches take ~4-5 us end to end
# (NVIDIA CUDA C++ Best Practices Guide, "kernel launch overhead"; Lustig & Martonosi measure
# 4-8 us), which dominates small ops such as CIFAR-sized convolutions.
_EFF = dict(vector_efficiency=0.80, memory_efficiency=0.85, kernel_launch_us=5.0)
_LINK_EFF = 0.80
# InfiniBand NICs: NCCL reaches 96 % of the line rate per NIC. NVIDIA/nccl-tests issue #119
# (maintainer sjeaugey, 2022-11-17): "we usually consider 24GB/s is the peak performance per 200G
# NIC (12 GB/s for 100G NICs)" = 24/25 of HDR's 25 GB/s; the same fraction of NDR's 50 GB/s is
# the ~48 GB/s per NIC behind DGX H100's ~380 GB/s multi-host bus bandwidth (nccl-tests issue
# #309). Ethernet/TCP (10GbE below) keeps the NVLink-like 0.80.
_NIC_EFF = 0.96
# Per-step latencies of a ring (latency_us below: 2 us per NVLink step, 5 us per network step) sit
# near NCCL's own tuner constants for its LL128 protocol, 1.9 us per NVLink step and 4.0 us per
# network step (NVIDIA/nccl src/graph/tuning.cc, ncclTunerConstantsDefaults hwLatencies, Ring).
# NCCL picks a protocol per message size: LL (0.6 / 2.7 us, half the bandwidth) for small
# messages, Simple (3.4 / 14 us plus an 8.4 us base, full bandwidth) for large ones; pipesim keeps
# one latency per link, so small collectives are slightly overcharged and large ones' latency
# undercharged: by about 18 us on an 8-GPU NVLink ring (a few % of a large TP collective), by
# milliseconds on rings of hundreds of ranks across nodes (ZeRO-3's per-tensor gathers).

# GPUs without FP8 tensor cores (Volta, Ampere, Pascal) carry no peak_tflops_fp8: FP8 training is
# refused there (Transformer Engine needs compute capability 8.9+).
# NVIDIA A100 Tensor Core GPU datasheet (2021): FP16/BF16 tensor 312 TF dense, TF32 156, FP32 19.5,
# FP16 non-tensor 78; HBM2 1,555 GB/s (40 GB) / HBM2e 2,039 GB/s (80 GB); NVLink 3 600 GB/s total
# (300 GB/s per direction). DGX A100 user guide: 8 GPUs, 8x 200 Gb/s HDR IB (25 GB/s per GPU).
_A100 = dict(name="A100-SXM4", peak_tflops_fp16=312, peak_tflops_bf16=312, peak_tflops_tf32=156,
             peak_tflops_fp32=19.5, vector_tflops_fp32=19.5, vector_tflops_fp16=78,
             kernel_curve="a100", **_EFF)
# NVIDIA H100 datasheet (SXM5): BF16/FP16 tensor 989 TF dense, FP8 1,979, TF32 494, FP32 67,
# FP16 non-tensor 134 (Hopper whitepaper Table 1); HBM3 3.35 TB/s, 80 GB; NVLink 4 900 GB/s total.
# DGX H100: 8x 400 Gb/s NDR (50 GB/s per GPU). H200 datasheet: same compute, 141 GB HBM3e 4.8 TB/s.
_H100 = dict(name="H100-SXM5", peak_tflops_fp16=989, peak_tflops_bf16=989, peak_tflops_tf32=494,
             peak_tflops_fp32=67, peak_tflops_fp8=1979, vector_tflops_fp32=67, vector_tflops_fp16=134,
             kernel_curve="h100", **_EFF)
# NVIDIA V100 datasheet (SXM2): FP16 tensor 125 TF, FP32 15.7, FP16 non-tensor 31.4; HBM2 900 GB/s;
# NVLink 2: 6 links x 25 GB/s per direction = 150 GB/s. DGX-1: 4x 100 Gb/s EDR IB per 8 GPUs.
_V100 = dict(name="V100-SXM2", peak_tflops_fp16=125, peak_tflops_bf16=15.7, peak_tflops_tf32=15.7,
             peak_tflops_fp32=15.7, vector_tflops_fp32=15.7, vector_tflops_fp16=31.4,
             kernel_curve="v100", **_EFF)
# Pascal consumer cards (NVIDIA GeForce GTX 1070 / 1080 Ti specifications; GP104/GP102 FP16 runs at
# 1/64 of FP32, so fp16 training uses FP32 math in practice). Boost clocks: 1070 1920 cores x
# 1.683 GHz x 2 = 6.46 TF, 256 GB/s GDDR5, 8 GB; 1080 Ti 3584 x 1.582 x 2 = 11.3 TF, 484 GB/s, 11 GB.
# Box: 4 cards on PCIe 3.0 x16 (15.75 GB/s per direction), no NVLink; 10 GbE between boxes.
_GTX1070 = dict(name="GTX-1070", peak_tflops_fp16=6.46, peak_tflops_bf16=6.46, peak_tflops_tf32=6.46,
                peak_tflops_fp32=6.46, vector_tflops_fp32=6.46, vector_tflops_fp16=6.46,
                hbm_bandwidth_GBps=256, memory_GiB=8, **_EFF)
_GTX1080TI = dict(_GTX1070, name="GTX-1080Ti", peak_tflops_fp16=11.3, peak_tflops_bf16=11.3, peak_tflops_tf32=11.3,
                  peak_tflops_fp32=11.3, vector_tflops_fp32=11.3, vector_tflops_fp16=11.3,
                  hbm_bandwidth_GBps=484, memory_GiB=11)
# NVIDIA DGX B200 datasheet (2024): per GPU FP4 dense 9 PF (144 PF sparse / 8 GPUs / 2), FP8 dense
# 4.5 PF (72 PF sparse / 8 GPUs / 2), FP16/
# BF16 dense 2.25 PF, TF32 dense 1.1 PF, FP32 80 TF (Blackwell datasheet); HBM3e 8 TB/s, 180 GB
# (1,440 GB per 8 GPUs); NVLink 5 1.8 TB/s total (900 GB/s per direction); 8x 400 Gb/s
# ConnectX-7 (50 GB/s per GPU). 148 SMs (Blackwell architecture technical brief).
_B200 = dict(name="B200", peak_tflops_fp16=2250, peak_tflops_bf16=2250, peak_tflops_tf32=1100,
             peak_tflops_fp32=80, peak_tflops_fp8=4500, peak_tflops_fp4=9000, vector_tflops_fp32=80, vector_tflops_fp16=160,
             hbm_bandwidth_GBps=8000, memory_GiB=180 * 1e9 / 2**30, kernel_curve="b200", **_EFF)
# NVIDIA GB200 NVL72 datasheet (2024): 72 Blackwell GPUs, FP4 dense 10 PF, FP8 dense 5 PF, FP16/BF16
# dense 2.5 PF, TF32 dense 1.25 PF (the 1,440/720/360/180 PF sparse rack figures / 72 / 2), FP32 80 TF per GPU; HBM3e
# 8 TB/s, 13.4 TB per 72 GPUs (186 GB); one NVLink 5 domain of 72 GPUs at 1.8 TB/s per GPU
# (900 GB/s per direction) across 18 compute trays of 4 GPUs; ConnectX-7 400 Gb/s per GPU out of
# the rack (50 GB/s).
_GB200 = dict(_B200, name="GB200", peak_tflops_fp16=2500, peak_tflops_bf16=2500, peak_tflops_tf32=1250,
              peak_tflops_fp8=5000, peak_tflops_fp4=10000, memory_GiB=186 * 1e9 / 2**30, kernel_curve="gb200")
# NVIDIA GB300 NVL72 datasheet (2025): Blackwell Ultra keeps GB200's dense FP8 (5 PF) and BF16
# (2.5 PF) per GPU; its gains are in FP4: 15 PF dense NVFP4, 1.5x Blackwell (NVIDIA technical blog
# "Inside NVIDIA Blackwell Ultra", 2025); FP32 75 TF; HBM3e 8 TB/s, 20 TB per 72 GPUs (288 GB);
# one NVLink 5 domain of 72; ConnectX-8 SuperNIC 800 Gb/s per GPU (100 GB/s). 160 SMs (NVIDIA
# technical blog "Inside NVIDIA Blackwell Ultra", 2025).
_GB300 = dict(_GB200, name="GB300", peak_tflops_fp32=75, peak_tflops_fp4=15000, vector_tflops_fp32=75,
              memory_GiB=288 * 1e9 / 2**30,
              kernel_curve="gb300")
# NVIDIA HGX/DGX B300 (2025; per-GPU table of the HGX B300 specification, as collected in
# G. Lockwood's processor notes, glennklockwood.com/garden/processors/B300): Blackwell Ultra SXM at
# the B200's dense rates except FP4, 13.125 PF dense (105 PF per 8 GPUs); BF16 2.25 PF, FP8 4.5 PF
# (DGX B300: 72 PF sparse FP8 training / 8 GPUs / 2), FP32 75 TF; HBM3e 8 TB/s, 288 GB (2.3 TB per
# 8); NVLink 5 1.8 TB/s; ConnectX-8 800 Gb/s per GPU (100 GB/s). Kernel curve: its own MAMF row
# (b300, 160 SMs).
_B300 = dict(_B200, name="B300", peak_tflops_fp32=75, peak_tflops_fp4=13125, vector_tflops_fp32=75,
             memory_GiB=288 * 1e9 / 2**30, kernel_curve="b300")
_PCIE3 = dict(bandwidth_GBps=15.75, latency_us=5.0, efficiency=_LINK_EFF)
_10GBE = dict(bandwidth_GBps=1.25, latency_us=20.0, efficiency=_LINK_EFF)


# GPU <-> host-memory copy rates, measured per GPU and direction (activation offloading):
# - PCIe Gen4 x16 (DGX A100): 25 GB/s, "the peak x16 PCIe Gen4" measured by the BaM authors
#   (ZaidQureshi/bam issue #54, maintainer's answer);
# - PCIe Gen5 x16 (DGX H100/H200/B200, HGX H800): 52.8 GB/s device-to-host on an H100 cluster
#   (NVIDIA/nvbandwidth issue #24, device_to_host_memcpy_sm, all 8 GPUs);
# - NVLink-C2C to Grace (GB200/GB300): 346 GB/s host-to-device with the copy engines on GH200, the
#   same 900 GB/s bidirectional C2C link (NVIDIA/nvbandwidth issue #23).
_HOST_PCIE4, _HOST_PCIE5, _HOST_C2C = 25.0, 52.8, 346.0

# Maximum input power of a node, kW (the run's energy: pipesim/report/goodput.py), from NVIDIA's
# DGX user guides, "Power Specifications": DGX A100 6.5 kW max, DGX H100 / H200 10.2 kW max,
# DGX B200 14.3 kW max. GB200 NVL72, per 4-GPU compute tray: 6.667 kW, the maxLoadWatts of the
# DGX_GB200 compute tray NVIDIA's Domain Power Service ships (DPS docs, "Device Specifications",
# latest version; an earlier version listed 5,640 W); the rack's NVLink switch trays are not in it.
# The other systems have no such figure here.
_NODE_KW = {"dgx-a100-40gb": 6.5, "dgx-a100-80gb": 6.5, "dgx-h100": 10.2, "dgx-h200": 10.2, "dgx-b200": 14.3,
            "gb200-nvl72": 6.667}


def _nvl72(gpu: dict, nic_GBps: float) -> dict:
    """A GB200/GB300 NVL72 rack: 18 trays of 4 GPUs, one 72-GPU NVLink domain spanning them."""
    return dict(num_nodes=18, gpus_per_node=4, nvlink_domain=72, gpu=gpu, host_link_GBps=_HOST_C2C,
                intra_node=dict(bandwidth_GBps=900, latency_us=2.0, efficiency=_LINK_EFF),
                inter_node=dict(bandwidth_GBps=nic_GBps, latency_us=5.0, efficiency=_NIC_EFF))


def _dgx(gpu: dict, nvlink_GBps: float, nic_GBps: float, nvlink_latency_us: float = 2.0,
         host_GBps: float | None = _HOST_PCIE5, nvls_GBps: float | None = None) -> dict:
    """An 8-GPU DGX node: NVLink inside, one InfiniBand NIC per GPU between nodes."""
    intra = dict(bandwidth_GBps=nvlink_GBps, latency_us=nvlink_latency_us, efficiency=_LINK_EFF)
    if nvls_GBps:
        intra["nvls_GBps"] = nvls_GBps
    return dict(num_nodes=1, gpus_per_node=8, gpu=gpu, host_link_GBps=host_GBps, intra_node=intra,
                inter_node=dict(bandwidth_GBps=nic_GBps, latency_us=5.0, efficiency=_NIC_EFF))


# NVLink SHARP (NVLS): the NVSwitch reduces in the switch, and NCCL's NVLS all-reduce reaches a bus
# bandwidth above the ring's on 8 GPUs (it needs CUDA multicast: third-generation NVSwitch on).
# Measured all-reduce busbw at large messages: H100 / H200 480 GB/s (NVIDIA GTC 2024 talk S62129,
# quoted in NVIDIA/nccl issue #1374; the nccl-tests maintainer gives the same 480 in nccl-tests
# issue #212); H800 215 GB/s (NVIDIA/nccl issue #1374, 8x H800); B200 830 GB/s (NVIDIA/nccl issue
# #1807, NCCL 2.27, "ours is 830+"). No measurement for B300 or inside an NVL72 rack: none set.
_NVLS_H100, _NVLS_H800, _NVLS_B200 = 480.0, 215.0, 830.0


SYSTEMS: dict[str, dict] = {
    "gtx-1070": dict(num_nodes=1, gpus_per_node=4, gpu=_GTX1070, intra_node=_PCIE3, inter_node=_10GBE),
    "gtx-1080ti": dict(num_nodes=1, gpus_per_node=4, gpu=_GTX1080TI, intra_node=_PCIE3, inter_node=_10GBE),
    "dgx1-v100": _dgx(dict(_V100, hbm_bandwidth_GBps=900, memory_GiB=32), 150, 6.25, nvlink_latency_us=3.0,
                      host_GBps=None),
    "dgx-a100-40gb": _dgx(dict(_A100, name="A100-SXM4-40GB", hbm_bandwidth_GBps=1555, memory_GiB=40), 300, 25,
                          host_GBps=_HOST_PCIE4),
    "dgx-a100-80gb": _dgx(dict(_A100, name="A100-SXM4-80GB", hbm_bandwidth_GBps=2039, memory_GiB=80), 300, 25,
                          host_GBps=_HOST_PCIE4),
    "dgx-h100": _dgx(dict(_H100, hbm_bandwidth_GBps=3350, memory_GiB=80), 450, 50, nvls_GBps=_NVLS_H100),
    "dgx-h200": _dgx(dict(_H100, name="H200-SXM", hbm_bandwidth_GBps=4800, memory_GiB=141, kernel_curve="h200"),
                     450, 50, nvls_GBps=_NVLS_H100),
    # NVIDIA H800 SXM5 (China export part): H100 SXM compute and HBM3, NVLink cut to 400 GB/s total
    # (200 per direction); HGX H800 nodes with 8x 400 Gb/s NICs (DeepSeek-V3 technical report
    # 2024, Sec. 3.1: 8 GPUs per node on NVLink/NVSwitch, InfiniBand 50 GB/s per GPU).
    "hgx-h800": _dgx(dict(_H100, name="H800-SXM5", hbm_bandwidth_GBps=3350, memory_GiB=80, kernel_curve="h800"),
                     200, 50, nvls_GBps=_NVLS_H800),
    "dgx-b200": _dgx(_B200, 900, 50, nvls_GBps=_NVLS_B200),
    # DGX B300's host is PCIe Gen6; no measured Gen6 copy rate, so the Gen5 measurement (a floor)
    "dgx-b300": _dgx(_B300, 900, 100),
    "gb200-nvl72": _nvl72(_GB200, 50),
    "gb300-nvl72": _nvl72(_GB300, 100),
    # The seed 003 notebook's A100-like system: 312 TF fp16 matrix, 19.5/78 TF fp32/fp16 vector,
    # 1555 GB/s HBM, NVLink 600 GB/s, IB 100 GB/s, NVLink islands of 4. The notebook divides bytes
    # by these figures directly, so efficiencies are 1 and latencies 0 here.
    "notebook-a100": dict(num_nodes=1, gpus_per_node=4,
                          gpu=dict(_A100, name="A100-notebook", hbm_bandwidth_GBps=1555, memory_GiB=80,
                                   matmul_efficiency=1.0, vector_efficiency=1.0, memory_efficiency=1.0,
                                   kernel_launch_us=0.0),
                          intra_node=dict(bandwidth_GBps=600, latency_us=0.0, efficiency=1.0),
                          inter_node=dict(bandwidth_GBps=100, latency_us=0.0, efficiency=1.0)),
}
for _name, _kw in _NODE_KW.items():
    SYSTEMS[_name] = dict(SYSTEMS[_name], node_power_kW=_kw)


@lru_cache(maxsize=None)
def preset_store_bandwidth(gpu_name: str, curve_name: str) -> float | None:
    """Achievable HBM bytes/s (datasheet bandwidth x memory efficiency) of the memory kernel curve
    `curve_name` was measured with: the preset GPU called `gpu_name` when it has that curve (A100
    40 / 80 GB share one), else a preset GPU that has it; None for a curve no preset names. It
    sets the curve's per-SM tensor rate (costs/gemm.py) whatever bandwidth a scenario then gives
    the GPU (a slower memory slows the GEMMs' tile epilogues, not the tensor cores)."""
    gpus = [s["gpu"] for s in SYSTEMS.values() if s["gpu"].get("kernel_curve") == curve_name]
    gpu = min(gpus, key=lambda g: g["name"] != gpu_name, default=None)      # its own name first
    return gpu["hbm_bandwidth_GBps"] * 1e9 * gpu.get("memory_efficiency", _EFF["memory_efficiency"]) if gpu else None


@lru_cache(maxsize=None)
def curve_peaks(curve_name: str) -> dict | None:
    """Dense matrix peaks, FLOP/s by dtype, of the datasheet GPU a kernel curve was measured on (the
    GPU of the system presets naming that curve, which agree): a curve's rates scale by a
    scenario's peak over these (costs/roofline.py CostModel.curve_factor)."""
    for system in SYSTEMS.values():
        gpu = system["gpu"]
        if gpu.get("kernel_curve") == curve_name:
            return {d: gpu[f"peak_tflops_{d}"] * 1e12 for d in ("fp16", "bf16", "fp32", "tf32", "fp8", "fp4")
                    if gpu.get(f"peak_tflops_{d}")}
    return None
