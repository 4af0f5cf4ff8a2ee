"""Held-out family nemolongseq (scenarios/validation/heldout.yaml): NVIDIA NeMo's long-sequence
performance tables (docs/source/performance/performance_long_sequence.md @ NVIDIA/NeMo 19fadb67b0,
2025-05-08) - Llama 2 7B FP8 on DGX H100 (NeMo 24.03.01) at 4K to 1M tokens and Llama 3 8B FP8 on
DGX B200 (NeMo 25.04.rc2) at 8K to 1M tokens, 4 Mi tokens per step, context parallelism growing with
the sequence. Test only: nothing in pipesim is set from these rows.

Metric: TFLOP/s per GPU as NeMo counts them (`nemo_llama_flops`): NeMo's llama2 / llama3 formula
(nemo/utils/flops_formulas.py until 6251117f4c of 2025-08-09, "Discount FLOPs in dot-product att"),
which counts the whole attention matrix (12·s/h per layer), not its causal half. The same formula
turns NeMo 24.07's published tokens/s into its published model TFLOP/s for Llama 2 7B and Llama 3
8B (16,934 -> 780 and 12,273 -> 711, published.yaml nemo2407; a test checks it), so like is
compared with like. At 1M tokens the attention term is 98 % of the count, so these rows test the
cost of ring attention almost alone.

Mapped as the NeMo 24.07 family (pipesim.whatif.families.nemo_scenario: FP8 with delayed scaling,
the distributed optimizer with overlapped reduce-scatter and all-gather, sequence parallelism and
TP communication overlap with TP, fused cuDNN attention - Transformer Engine 1.4, the release of
March 2024, selects its fused attention on Hopper under CP too, attention.py "Select FusedAttention
on sm90" - and no recompute), CP as Transformer Engine's default ring (cp_comm_type p2p) over 2·CP
load-balanced chunks. Not stated by the page, assumed once for the family: micro-batch 1, no
activation recompute. The Llama 3 table's "# of GPUs" column is 4x the product of its TP, PP, DP
and CP columns on every row and its batch sizes divide by its DP column only, so the rows carry
the configuration's product (heldout.yaml).
"""
from __future__ import annotations

from pipesim.whatif.families import mapped, nemo_scenario

# published GPU -> system preset (the B200 rows' DGX B200; H100 as nemo_scenario maps it)
LONGSEQ_SYSTEMS = {"H100-SXM5-80GB": "dgx-h100", "B200": "dgx-b200"}


def longseq_scenario(case) -> dict:
    """The scenario of a long-sequence row: the NeMo 24.07 mapping on the row's system."""
    preset = mapped(LONGSEQ_SYSTEMS, case.raw["hardware"]["gpu"], case.id, "hardware.gpu", "has no system preset")
    d = nemo_scenario(case)
    d["system"]["preset"] = preset
    return d


def nemo_llama_flops(s) -> float:
    """FLOPs per step as NeMo's llama2 / llama3 formula counts them (module docstring):
    B·s·L·h²·(12 + 12·g/a + 18·f/h + 12·s/h + 6·V/(L·h)), g the query groups, f the FFN width."""
    m, B = s.model, s.training.global_batch_size
    S, L, h = m.seq_length, m.num_layers, m.hidden_size
    per = 12 + 12 * m.kv_heads / m.num_attention_heads + 18 * m.ffn / h + 12 * S / h + 6 * m.vocab_size / (L * h)
    return B * S * L * h * h * per
