"""Fused MoE dispatcher kernels: pipesim's rates against the published kernel benchmarks.

    python benchmarks/moe_dispatch_rates.py

Each published figure is a "bottleneck bandwidth": intranode, the bytes a rank receives over
NVLink (its own tokens included) per second of the kernel; internode, the bytes it sends to
nodes per second, one copy per distinct destination node, its own node included (DeepEP's
tests/test_internode.py `num_rdma_token_sent`; V2's README: "contains local rank traffic"). pipesim's figure is the same quotient of its own a2a_costs (costs/moe.py) for the
benchmark's setting, so the table shows how each term was made and where it departs:

1. HybridEP on GB200 (deepseek-ai/DeepEP PR #420, 8 ranks, BF16 dispatch, combine): the table is
   pipesim's kernel rate (costs/moe_dispatch.py), capped by NVLink 5; the rows between its SM
   counts are pipesim's interpolation.
1b. DeepEP V1 over one GB200 NVL72 domain (NVIDIA, NVIDIA/Megatron-LM docs/discussions/deepseek-v3-
   gb200-optimization, Sec. 2.2.1: EP 32, 24 SMs, ~400 / ~190 GB/s): the point pipesim's deepep
   kernel rate on Blackwell is (costs/moe_dispatch.py DEEPEP_BLACKWELL), beside HybridEP there.
2. DeepEP V1 on H800 (deepseek-ai/DeepEP docs/legacy.md, normal kernels, 24 SMs, DeepSeek-V3's
   setting: 4096 tokens per rank, hidden 7168, top-8 of 256 in 4 of 8 groups): intranode the
   NVLink bound, internode the RDMA bound; pipesim times DeepEP on Hopper at the links.
3. DeepEP V2 on SM100 (deepseek-ai/DeepEP README, EP 8 over NVLink, 8K tokens): not the V1 kernels
   Megatron-Core 2026 runs; pipesim's deepep there is V1's rate (1b), well below V2's.
"""
from __future__ import annotations

import pipesim
from pipesim.costs.layers import shapes_of
from pipesim.costs.moe import a2a_costs, parts_hit
from pipesim.costs.moe_dispatch import kernel_rate
from pipesim.costs.moe_parallel import expert_placement

HYBRIDEP_GB200 = [(16, 362.01, 310.21), (20, None, None), (24, 512.72, 425.95), (28, None, None),
                  (32, 615.78, 519.57), (48, None, None)]
DEEPEP_V1_H800 = [(8, "intranode", 153, 158), (16, "internode", 43, 43), (32, "internode", 58, 57),
                  (64, "internode", 51, 50)]
DEEPEP_V2_SM100 = [(64, 726, 740), (24, 643, 675)]


def scenario(model: str, system: str, nodes: int, ep: int, tokens: int, dispatcher: str, sms=None):
    return pipesim.load_scenario({
        "model": {"preset": model, "seq_length": tokens, "mtp_layers": 0},
        "system": {"preset": system, "num_nodes": nodes},
        "parallel": {"tensor": 1, "pipeline": 1, "data": ep, "expert": ep},
        "training": {"micro_batch_size": 1, "global_batch_size": ep, "precision": "bf16",
                     "moe_routing": "balanced", "moe_dispatcher": dispatcher,
                     **({"moe_dispatcher_sms": sms} if sms else {})}})


def logical_rates(s) -> tuple[float, float, float]:
    """(received bytes per rank / dispatch time, the same for combine, RDMA bytes / dispatch time),
    GB/s. a2a_costs returns dispatch + combine; a phase is the longer of the link-bound half (the
    same scenario under the link-bound deepep model) and the received bytes at the kernel's rate."""
    sh = shapes_of(s)
    cost = a2a_costs(s, sh)
    tokens = s.training.micro_batch_size * s.model.seq_length
    recv = tokens * s.model.hidden_size * sh.e * parts_hit(s.model, s.parallel.expert)
    g = expert_placement(s, "ep")
    per = g.per_node
    islands = -(-s.parallel.expert // per)
    # the wire: the same bytes at the links' bandwidths (a2a_costs' link bound)
    t_link = max(cost.intra_bytes / g.intra.bandwidth, cost.inter_bytes / g.inter.bandwidth)
    t_d, t_c = (max(t_link, recv / rate) if rate else t_link
                for rate in (kernel_rate(s, per, phase, sh.e, one_domain=islands == 1)
                             for phase in ("dispatch", "combine")))
    assert abs(t_d + t_c - cost.fwd) < 0.02 * cost.fwd    # a2a_costs' split, but for its latency α
    # DeepEP's RDMA figure counts every distinct (token, node) pair, the token's own node included
    # (tests/test_internode.py: num_rdma_token_sent over rdma_idx, deduplicated per node)
    rdma = cost.inter_bytes * islands / (islands - 1) if islands > 1 else 0.0
    return recv / t_d / 1e9, recv / t_c / 1e9, rdma / t_d / 1e9


def main() -> None:
    print("1. HybridEP on GB200, 8 ranks (DeepEP PR #420, 'Torch API'), GB/s received per rank; "
          "Qwen3-30B-A3B routing, 4096 tokens per rank")
    print(f"   {'SMs':>4} {'dispatch pub':>13} {'pipesim':>8} {'combine pub':>12} {'pipesim':>8}")
    for sms, disp, comb in HYBRIDEP_GB200:
        s = scenario("qwen3-30b-a3b", "gb200-nvl72", 2, 8, 4096, "hybridep", sms)
        d, c, _ = logical_rates(s)
        pub_d = f"{disp:13.0f}" if disp else f"{'-':>13}"
        pub_c = f"{comb:12.0f}" if comb else f"{'-':>12}"
        print(f"   {sms:>4} {pub_d} {d:>8.0f} {pub_c} {c:>8.0f}")
    link = logical_rates(scenario("qwen3-30b-a3b", "gb200-nvl72", 2, 8, 4096, "hybridep", 147))
    print(f"   NVLink 5 bound (147 SMs: the link's pace): dispatch {link[0]:.0f}, combine {link[1]:.0f}\n")

    print("1b. DeepEP V1 over GB200 NVL72, EP 32 in one NVLink domain, 24 SMs (NVIDIA, Megatron-LM "
          "DeepSeek-V3 GB200 discussion, Sec. 2.2.1), GB/s; DeepSeek-V3 setting, 4096 tokens per rank")
    d, c, _ = logical_rates(scenario("deepseek-v3", "gb200-nvl72", 8, 32, 4096, "deepep", 24))
    h, hc, _ = logical_rates(scenario("deepseek-v3", "gb200-nvl72", 8, 32, 4096, "hybridep", 32))
    print(f"   dispatch 400 vs pipesim {d:.0f}, combine 190 vs {c:.0f}; HybridEP at its 32 SMs there: "
          f"dispatch {h:.0f}, combine {hc:.0f} (its 24-rank row)\n")

    print("2. DeepEP V1 normal kernels on H800 (docs/legacy.md; 24 SMs), DeepSeek-V3 setting, 4096 tokens "
          "per rank: the bottleneck bandwidth, GB/s")
    print(f"   {'EP':>4} {'kind':>10} {'dispatch pub':>13} {'pipesim':>8} {'combine pub':>12} {'pipesim':>8}")
    for ep, kind, disp, comb in DEEPEP_V1_H800:
        s = scenario("deepseek-v3", "hgx-h800", max(1, ep // 8), ep, 4096, "deepep")
        d, c, rdma = logical_rates(s)
        got_d, got_c = (d, c) if kind == "intranode" else (rdma, rdma)
        print(f"   {ep:>4} {kind:>10} {disp:>13} {got_d:>8.0f} {comb:>12} {got_c:>8.0f}")
    print()

    print("3. DeepEP V2 on SM100, EP 8 over NVLink (README), GB/s received per rank incl. local; pipesim's "
          "deepep (V1's NVL72 rate, per SM, up to the link) on dgx-b200, DeepSeek-V3 setting, 8192 tokens per rank")
    for sms, disp, comb in DEEPEP_V2_SM100:
        d, c, _ = logical_rates(scenario("deepseek-v3", "dgx-b200", 1, 8, 8192, "deepep", sms))
        print(f"   {sms:>3} SMs: dispatch {disp} vs pipesim {d:.0f} ({100 * (d / disp - 1):+.0f} %), "
              f"combine {comb} vs {c:.0f} ({100 * (c / comb - 1):+.0f} %)")


if __name__ == "__main__":
    main()
