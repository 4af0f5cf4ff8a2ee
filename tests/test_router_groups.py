"""Group-limited routing (model.moe_router_num_groups / moe_router_group_topk): DeepSeek-V3's
node-limited routing cuts the DeepEP dispatcher's inter-node copies; and the distinct parts (EP
ranks or islands) a token's experts hit, which set DeepEP's volumes."""
import itertools
from types import SimpleNamespace

import pytest

from pipesim import load_scenario
from pipesim.costs.moe import parts_hit
from pipesim.errors import ScenarioError


def brute_force(E, parts, k, groups=0, top=0):
    """Expected distinct parts hit by a token's k experts, by enumeration (E/parts experts per
    part; with groups: `top` of the `groups` equal expert groups drawn uniformly, then k experts
    uniformly among theirs)."""
    part = lambda e: e // (E // parts)
    group = lambda e: e // (E // groups) if groups else 0
    draws = []
    group_sets = itertools.combinations(range(groups), top) if groups else [(0,)]
    for gs in group_sets:
        experts = [e for e in range(E) if group(e) in gs]
        for pick in itertools.combinations(experts, k):
            draws.append(len({part(e) for e in pick}))
    return sum(draws) / len(draws)


def moe(E, k, groups=0, top=0):
    return SimpleNamespace(num_experts=E, moe_top_k=k, moe_router_num_groups=groups, moe_router_group_topk=top)


@pytest.mark.parametrize("E,parts,k,groups,top", [(8, 4, 2, 4, 2), (16, 4, 3, 4, 2), (12, 3, 4, 3, 2),
                                                  (16, 8, 3, 4, 2), (24, 6, 4, 3, 2), (16, 1, 4, 4, 2)])
def test_expected_parts_hit_match_enumeration(E, parts, k, groups, top):
    """Parts equal to the groups (islands under node-limited routing), finer than them (ranks
    inside node groups) and a single part; remote parts are (n-1)/n of them by symmetry."""
    assert parts_hit(moe(E, k, groups, top), parts) == pytest.approx(brute_force(E, parts, k, groups, top))
    assert parts_hit(moe(E, k), parts) == pytest.approx(brute_force(E, parts, k))
    if parts > 1:
        assert parts_hit(moe(E, k, groups, top), parts) < parts_hit(moe(E, k), parts)


def test_deepseek_v3_preset_limits_tokens_to_4_of_8_nodes():
    s = load_scenario({"model": {"preset": "deepseek-v3"}, "system": {"preset": "dgx-h100", "num_nodes": 8},
                       "parallel": {"tensor": 1, "pipeline": 1, "data": 64, "expert": 64},
                       "training": {"micro_batch_size": 1, "global_batch_size": 512, "moe_dispatcher": "deepep"}})
    m = s.model
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (8, 4)
    assert parts_hit(m, 8) < 0.7 * parts_hit(moe(256, 8), 8)


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
