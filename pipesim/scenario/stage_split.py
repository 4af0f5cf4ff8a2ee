"""Layers per model chunk when the pipeline does not divide the layer count evenly."""
from __future__ import annotations


def embedding_loss_split(layers: int, chunks: int) -> list[int]:
    """Megatron-Core's split with the input embedding and the loss counted as a layer each
    (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split): the
    layers + 2 slots are dealt out as evenly as possible (the remainder to the first chunks, where
    Megatron asserts an exact division), then the first and last chunks give up the slot the
    embedding and the head take (Llama 3 405B on 128 chunks: the first holds only the embedding,
    the last only the head). [] when there are more chunks than slots."""
    if chunks < 1 or layers + 2 < chunks:
        return []
    base, extra = divmod(layers + 2, chunks)
    split = [base + 1] * extra + [base] * (chunks - extra)
    split[0] -= 1
    split[-1] -= 1
    return split if min(split) >= 0 and sum(split) == layers else []
