"""Group-limited routing (model.moe_router_num_groups / moe_router_group_topk): DeepSeek-V3's
node-limited routing cuts the DeepEP dispatcher's inter-node copies."""
import itertools
from types import SimpleNamespace

import pytest

from pipesim import load_scenario
from pipesim.costs.moe import remote_islands
from pipesim.errors import ScenarioError


def brute_force(E, islands, k, groups=0, top=0):
    """Expected distinct islands other than island 0 hit by a token's k experts, by enumeration
    (groups = islands: `top` groups drawn uniformly, then k experts uniformly among theirs)."""
    per = E // islands
    island = lambda e: e // per
    draws = []
    group_sets = itertools.combinations(range(islands), top) if groups else [tuple(range(islands))]
    for gs in group_sets:
        experts = [e for e in range(E) if island(e) in gs]
        for pick in itertools.combinations(experts, k):
            draws.append(len({island(e) for e in pick} - {0}))
    return sum(draws) / len(draws)


@pytest.mark.parametrize("E,islands,k,top", [(8, 4, 2, 2), (16, 4, 3, 2), (12, 3, 4, 2)])
def test_expected_remote_islands_match_enumeration(E, islands, k, top):
    limited = SimpleNamespace(num_experts=E, moe_top_k=k, moe_router_num_groups=islands, moe_router_group_topk=top)
    uniform = SimpleNamespace(num_experts=E, moe_top_k=k, moe_router_num_groups=0, moe_router_group_topk=0)
    assert remote_islands(limited, islands) == pytest.approx(brute_force(E, islands, k, islands, top))
    assert remote_islands(uniform, islands) == pytest.approx(brute_force(E, islands, k))
    assert remote_islands(limited, islands) < remote_islands(uniform, islands)


def test_deepseek_v3_preset_limits_tokens_to_4_of_8_nodes():
    s = load_scenario({"model": {"preset": "deepseek-v3"}, "system": {"preset": "dgx-h100", "num_nodes": 8},
                       "parallel": {"tensor": 1, "pipeline": 1, "data": 64, "expert": 64},
                       "training": {"micro_batch_size": 1, "global_batch_size": 512, "moe_dispatcher": "deepep"}})
    m = s.model
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (8, 4)
    assert remote_islands(m, 8) < 0.7 * remote_islands(SimpleNamespace(
        num_experts=256, moe_top_k=8, moe_router_num_groups=0, moe_router_group_topk=0), 8)


def test_malformed_groups_are_one_line_errors():
    base = {"system": {"preset": "dgx-h100", "num_nodes": 1}, "parallel": {"data": 8, "expert": 8},
            "training": {"micro_batch_size": 1, "global_batch_size": 8}}
    for model, key in (({"moe_router_num_groups": 6, "moe_router_group_topk": 2}, "model.moe_router_num_groups"),
                       ({"moe_router_group_topk": 2}, "model.moe_router_num_groups"),
                       ({"moe_router_num_groups": 8, "moe_router_group_topk": 9}, "model.moe_router_group_topk"),
                       ({"moe_router_num_groups": 8, "moe_router_group_topk": 0}, "model.moe_router_group_topk")):
        with pytest.raises(ScenarioError, match=key) as e:
            load_scenario({**base, "model": {"preset": "qwen3-30b-a3b", **model}})
        assert "\n" not in str(e.value)
