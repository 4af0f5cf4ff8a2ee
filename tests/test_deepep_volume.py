"""DeepEP sends a token once per distinct destination rank, not once per chosen expert: its
dispatch and combine volumes, and the permute it leaves to the receiving rank."""
import random

import pytest

from pipesim import load_scenario
from pipesim.costs.layers import shapes_of
from pipesim.costs.moe import a2a_costs, moe_block_ops, parts_hit


def qwen3(dispatcher: str, nodes: int = 1, ep: int = 8) -> object:
    return load_scenario({"model": {"preset": "qwen3-30b-a3b", "seq_length": 4096},
                          "system": {"preset": "dgx-h100", "num_nodes": nodes},
                          "parallel": {"data": 8 * nodes, "expert": ep},
                          "training": {"micro_batch_size": 1, "global_batch_size": 8 * nodes,
                                       "moe_dispatcher": dispatcher, "moe_routing": "balanced"}})


def sampled_rank_copies(E: int, k: int, ep: int, per: int, draws: int = 20000, seed: int = 7):
    """Per token, by sampling uniform top-k routing from rank 0: copies DeepEP moves over NVLink
    (distinct destination ranks other than the GPU the token lands on in their island) and over
    the network (distinct remote islands)."""
    rng = random.Random(seed)
    nvlink = network = 0
    for _ in range(draws):
        ranks = {e // (E // ep) for e in rng.sample(range(E), k)}
        islands = {r // per for r in ranks}
        network += len(islands - {0})
        landing = {i * per for i in islands}            # rank 0's same-index GPU in every island
        nvlink += len(ranks - landing)
    return nvlink / draws, network / draws


def test_intranode_volume_is_one_copy_per_distinct_rank():
    s = qwen3("deepep")
    sh = shapes_of(s)
    row = sh.tokens * s.model.hidden_size * sh.e                  # one token's bytes, all tokens
    d = a2a_costs(s, sh)
    nvlink, network = sampled_rank_copies(128, 8, 8, 8)
    assert network == 0 and d.inter_bytes == 0
    assert d.intra_bytes / row == pytest.approx(nvlink, rel=0.02)
    assert d.intra_bytes / row == pytest.approx(parts_hit(s.model, 8) * 7 / 8)
    nccl = a2a_costs(qwen3("alltoall"), sh)
    assert nccl.intra_bytes / row == pytest.approx(8 * 7 / 8)     # one copy per expert
    assert d.intra_bytes < 0.7 * nccl.intra_bytes and d.fwd < 0.75 * nccl.fwd


def test_two_islands_forward_over_nvlink_only_what_does_not_land_in_place():
    s = qwen3("deepep", nodes=2, ep=16)
    sh = shapes_of(s)
    row = sh.tokens * s.model.hidden_size * sh.e
    d = a2a_costs(s, sh)
    nvlink, network = sampled_rank_copies(128, 8, 16, 8)
    assert d.inter_bytes / row == pytest.approx(network, rel=0.02)
    assert d.intra_bytes / row == pytest.approx(nvlink, rel=0.02)


def test_the_receiver_permutes_its_distinct_tokens_once():
    ops = {}
    for dispatcher in ("deepep", "alltoall"):
        s = qwen3(dispatcher)
        sh = shapes_of(s)
        ops[dispatcher] = {o.name: o for o in moe_block_ops(s, sh)}
    T, k, row = sh.tokens, s.model.moe_top_k, s.model.hidden_size * sh.e
    rows = T * k                                                # balanced: T·k copies reach a rank
    assert ops["alltoall"]["permute"].bytes_fwd == pytest.approx(2 * (T * k + rows) * row)
    assert ops["deepep"]["permute"].bytes_fwd == pytest.approx(2 * rows * row)
    recv = T * parts_hit(s.model, 8)                            # distinct tokens a rank receives
    assert ops["deepep"]["unpermute"].bytes_fwd == pytest.approx((rows + recv) * row)
    assert ops["alltoall"]["unpermute"].bytes_fwd == pytest.approx((T * k + rows + T) * row)
