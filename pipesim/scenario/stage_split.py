"""Layers per model chunk when the pipeline does not divide the layer count evenly: Megatron's split
counting the embedding and the loss as layers, or Megatron's layout strings."""
from __future__ import annotations

import re


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


# Megatron-Core's --pipeline-model-parallel-layout (megatron/core/transformer/
# pipeline_parallel_layer_layout.py): one symbol per layer - E embedding, t Transformer layer, m
# multi-token-prediction depth, L loss - chunks in model order separated by "|", "x*n" repeating a
# symbol, "(...)*n" a group, commas cosmetic. E.g. DeepSeek-V3 on 16 chunks, Megatron-Bridge's
# "Et*4|(t*4|)*14tmL": 4 layers in each of the first 15 chunks, 1 and the MTP block in the last.
LAYOUT_SYMBOLS = "EtmL"
MAX_LAYOUT_SYMBOLS = 100_000      # far above any model's layers; bounds what a typo can unroll to
_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_REPEAT = re.compile(r"(.)\*(\d+)")


def _times(match) -> str:
    body, n = match.group(1), int(match.group(2))
    if len(body) * n > MAX_LAYOUT_SYMBOLS:
        raise ValueError(f"{match.group(0)[:40]} unrolls to more than {MAX_LAYOUT_SYMBOLS:,} symbols")
    return body * n


def unroll_layout(text: str) -> list[str]:
    """The chunks of a layout string, one symbol per layer each; ValueError names what is wrong."""
    flat = text.replace(",", "").replace(" ", "")
    while _GROUP.search(flat):
        flat = _GROUP.sub(_times, flat)
        if len(flat) > MAX_LAYOUT_SYMBOLS:
            raise ValueError(f"unrolls to more than {MAX_LAYOUT_SYMBOLS:,} symbols")
    flat = _REPEAT.sub(_times, flat)
    bad = sorted(set(flat) - set(LAYOUT_SYMBOLS + "|"))
    if bad:
        raise ValueError(f"symbols {bad} are not Megatron layout symbols (E embedding, t layer, m MTP, L loss, "
                         f"| between chunks, x*n and (...)*n repeats)")
    return flat.split("|")


def layout_split(text: str, num_layers: int, mtp_layers: int, chunks: int) -> list[int]:
    """Layers per chunk of a Megatron layout string, checked as Megatron-Core checks it (one E, first;
    one L, last; num_layers t; mtp_layers m, after every t) and as pipesim places the rest: the
    embedding on the first chunk, the head and the MTP blocks on the last. ValueError otherwise."""
    parts = unroll_layout(text)
    flat = "".join(parts)
    if len(parts) != chunks:
        raise ValueError(f"{len(parts)} chunks ≠ pipeline·virtual_stages = {chunks}")
    if flat.count("E") != 1 or not parts[0].startswith("E"):
        raise ValueError("the embedding (E) must open the first chunk, once")
    if flat.count("L") != 1 or not parts[-1].endswith("L"):
        raise ValueError("the loss (L) must close the last chunk, once")
    if flat.count("t") != num_layers:
        raise ValueError(f"{flat.count('t')} layers (t) ≠ num_layers({num_layers})")
    last = parts[-1]
    mtp_misplaced = any("m" in p for p in parts[:-1]) or ("m" in last and "t" in last[last.index("m"):])
    if flat.count("m") != mtp_layers or mtp_misplaced:
        raise ValueError(f"{flat.count('m')} MTP blocks (m) ≠ mtp_layers({mtp_layers}), or not after the last layer "
                         f"of the last chunk, where pipesim places them")
    return [p.count("t") for p in parts]
