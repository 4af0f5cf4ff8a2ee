"""training.zero_replicas: hybrid sharding (Megatron-Core distributed-optimizer instances, HSDP)."""
import pytest

import pipesim
from pipesim.costs import stage_costs
from pipesim.costs.collectives import GroupPlacement, Link, collective_time
from pipesim.costs.zero_groups import replica_split, zero_collective_time
from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario

NVLINK, IB = Link(400e9, 3e-6), Link(50e9, 8e-6)


def scenario(replicas=1, zero=1, data=16, **extra):
    training = {"micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16", "attention": "flash",
                "zero_stage": zero, "zero_replicas": replicas, **extra}
    return load_scenario({"model": {"preset": "llama2-7b", "num_layers": 4}, "system": {"preset": "dgx-h100",
                                                                                         "num_nodes": data // 8},
                          "parallel": {"data": data}, "training": training})


def test_a_replica_is_a_slice_of_consecutive_ranks():
    group = GroupPlacement(64, 8, NVLINK, IB)                     # 64 ranks, 8 on each node
    shard, replica = replica_split(group, 8)
    assert (shard.size, shard.nodes, replica.size, replica.nodes) == (8, 1, 8, 8)
    shard, replica = replica_split(group, 2)                      # two halves of 4 nodes each
    assert (shard.size, shard.nodes, replica.size, replica.nodes) == (32, 4, 2, 2)
    shard, replica = replica_split(GroupPlacement(64, 8, NVLINK, IB), 32)   # slices of 2 on one node
    assert (shard.size, shard.nodes, replica.size, replica.per_node) == (2, 1, 32, 4)


def test_replicas_reduce_scatter_inside_then_all_reduce_the_shard_across():
    group, nbytes = GroupPlacement(64, 8, NVLINK, IB), 1e9
    shard, replica = replica_split(group, 8)
    rs = zero_collective_time("reduce_scatter", nbytes, group, 8, "ring")
    assert rs == pytest.approx(collective_time("reduce_scatter", nbytes, shard, "ring")
                               + collective_time("all_reduce", nbytes / 8, replica, "ring"))
    assert zero_collective_time("all_gather", nbytes, group, 8, "ring") == collective_time("all_gather", nbytes,
                                                                                           shard, "ring")
    # one replica is the flat group; an all-reduce (no sharding) always spans the group
    assert zero_collective_time("reduce_scatter", nbytes, group, 1, "ring") == collective_time(
        "reduce_scatter", nbytes, group, "ring")
    assert zero_collective_time("all_reduce", nbytes, group, 8, "ring") == collective_time("all_reduce", nbytes,
                                                                                           group, "ring")
    # inside a node the gathers run on NVLink: faster than over the 8 nodes
    assert zero_collective_time("all_gather", nbytes, group, 8, "ring") < collective_time("all_gather", nbytes,
                                                                                          group, "ring")


@pytest.mark.parametrize("zero", [1, 3])
def test_states_shard_over_one_replica(zero):
    flat, hybrid = stage_costs(scenario(zero=zero))[0].static, stage_costs(scenario(2, zero=zero))[0].static
    assert hybrid.optimizer == pytest.approx(2 * flat.optimizer)
    if zero == 3:
        assert hybrid.weights == pytest.approx(2 * flat.weights)
    else:
        assert hybrid.weights == flat.weights


def test_the_simulator_and_the_closed_form_see_the_replicas():
    from pipesim.whatif.analytic import analytic_report
    flat, hybrid = scenario(zero=3, data=16), scenario(2, zero=3, data=16)
    sim = {k: pipesim.simulate(s) for k, s in (("flat", flat), ("hybrid", hybrid))}
    assert sim["hybrid"].peak_memory_bytes > sim["flat"].peak_memory_bytes
    ana = {k: analytic_report(s) for k, s in (("flat", flat), ("hybrid", hybrid))}
    assert ana["hybrid"]["peak_memory_bytes"] > ana["flat"]["peak_memory_bytes"]
    # two nodes: each replica is one node, its gathers stay on NVLink
    assert sim["hybrid"].exposed_comm_s.get("ZERO_GATHER", 0.0) < sim["flat"].exposed_comm_s["ZERO_GATHER"]


@pytest.mark.parametrize("sets, needle", [
    (["training.zero_replicas=3"], "do not split data(16)"),
    (["training.zero_replicas=2", "training.zero_stage=0"], "zero_stage >= 1"),
    (["training.zero_replicas=0"], "training.zero_replicas"),
])
def test_bad_replicas_are_one_line_naming_the_key(sets, needle):
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario(), sets)
    assert "training.zero_replicas" in str(err.value) and needle in str(err.value) and "\n" not in str(err.value)


def test_expert_data_parallelism_must_split_too():
    raw = {"model": {"preset": "mixtral-8x7b", "num_layers": 2}, "system": {"preset": "dgx-h100", "num_nodes": 2},
           "parallel": {"data": 16, "expert": 8},
           "training": {"global_batch_size": 16, "zero_stage": 1, "zero_replicas": 4}}
    with pytest.raises(ScenarioError, match="expert-data-parallel group"):
        load_scenario(raw)
    raw["training"]["zero_replicas"] = 2
    assert load_scenario(raw).training.zero_replicas == 2
