"""Held-out family sdpa2025 (scenarios/validation/heldout.yaml): NVIDIA's single-GPU training
benchmark of Hugging Face's Llama 3.2 1B under PyTorch SDPA's cuDNN and FlashAttention backends, on
a B200 and an H200 (NVIDIA/cudnn-frontend benchmark/Llama-3.2-1B-Training, May 2025). Test only:
nothing in pipesim is set from these rows. Metric: tokens/s per GPU (batch x sequence / iteration).

Mapped as the script runs it (training_perf.py): the llama3.2-1b preset at the row's sequence length
and batch, one GPU, BF16 throughout (torch.set_default_dtype: BF16 weights, no fp32 master copy),
SGD, no dropout, Hugging Face's eager modeling code (kernel_fusion eager: unfused RMSNorm, rotary,
SiLU-and-multiply), the loss as transformers 4.35 computes it (logits upcast to fp32, then
F.cross_entropy: cross_entropy torch), and the backend the row names: CUDNN_ATTENTION -> sdpa-cudnn
(PyTorch SDPA's own cuDNN path), FLASH_ATTENTION -> fa2 (the FlashAttention-2 PyTorch vendors).
The clocks were locked (B200 1665 MHz, H200 1500 MHz); both lie above the clock a dense load holds
at these GPUs' power limits (B200 1339 MHz, H200 1465 MHz: the MSMF runs of presets/gpus.py), so
the kernels run at the power-limited sustained rate pipesim uses anyway, and no clock is set.
"""
from __future__ import annotations

from pipesim.whatif.families import mapped

SDPA_SYSTEMS = {"B200": "dgx-b200", "H200": "dgx-h200"}
SDPA_KERNELS = {"CUDNN_ATTENTION": "sdpa-cudnn", "FLASH_ATTENTION": "fa2"}


def sdpa_scenario(case) -> dict:
    c, cid = case.raw, case.id
    system = mapped(SDPA_SYSTEMS, c["hardware"]["gpu"], cid, "hardware.gpu", "has no system preset")
    batch = int(c["parallel"]["batch"])
    return {"model": {"preset": "llama3.2-1b", "name": cid, "seq_length": int(c["model"]["seq_len"]), "dropout": False},
            "system": {"preset": system, "num_nodes": 1, "gpus_per_node": 1},
            "parallel": {"tensor": 1, "pipeline": 1, "data": 1},
            "training": {"micro_batch_size": batch, "global_batch_size": batch, "precision": "bf16",
                         "optimizer": "sgd", "zero_stage": 0, **transformers_stack(c["training"], cid, required=True)}}


def transformers_stack(training: dict, cid: str, required: bool = False) -> dict:
    """The training keys of Hugging Face's eager modeling code (module docstring): unfused ops, the
    loss on fp32 logits, and the SDPA backend the run names (`sdpa_backend`, which this family's
    rows must name: `required`; else SDPA's own order, FlashAttention-2 first, when it names none)."""
    backend = training["sdpa_backend"] if required else training.get("sdpa_backend")
    kernel = "fa2" if backend is None else mapped(SDPA_KERNELS, backend, cid, "training.sdpa_backend",
                                                  "has no kernel table")
    return {"kernel_fusion": "eager", "attention": "flash", "attention_kernel": kernel, "cross_entropy": "torch"}
