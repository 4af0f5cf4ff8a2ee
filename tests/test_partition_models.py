"""Model graphs: CNN presets match their published shapes; seeds' partitions are balanced."""
import pytest

from pipesim import load_scenario
from pipesim.partition.cluster import cluster_from_system, load_system
from pipesim.partition.cnn import cnn_graph
from pipesim.partition.report import build_report
from pipesim.partition.solve import partition
from pipesim.partition.stages import Options, boundary_bytes, cut_edges
from pipesim.partition.transformer import layers_per_stage, transformer_graph

GTX1070 = load_system("gtx-1070")
GPT2_SCENARIO = "scenarios/partition/gpt2_small_gtx1070.yaml"


@pytest.mark.parametrize("preset,params", [
    # torchvision's parameter counts of the same architectures (1000 classes)
    ("resnet50", 25_557_032), ("resnet101", 44_549_160), ("mobilenetv2", 3_504_872)])
def test_cnn_parameter_counts(preset, params):
    g = cnn_graph(preset, GTX1070.gpu, batch=1)
    assert sum(n.params for n in g.nodes) == params


def test_resnet50_shapes_flops_and_skips():
    g = cnn_graph("resnet50", GTX1070.gpu, batch=2)
    # He et al. 2016 Table 1: ~3.8-4.1 GMACs per 224x224 image (4.1 with the stride on the 3x3 conv);
    # conv/linear FLOPs are 2 per MAC, forward + backward = 3x forward.
    macs = sum(n.flops for n in g.nodes if "conv" in n.op or "linear" in n.op) / 3 / 2 / 2
    assert 4.0e9 < macs < 4.2e9
    adds = [n for n in g.nodes if n.op.startswith("add")]
    assert len(adds) == 16                                        # 3 + 4 + 6 + 3 bottlenecks
    assert all(len(n.inputs) == 2 for n in adds)
    # output of layer4 before the head: 2 x 2048 x 7 x 7 fp32
    assert g.nodes[g.index("layer4.2.add")].out_bytes == 2 * 2048 * 7 * 7 * 4
    # a cut between blocks carries one tensor; a cut inside a block also carries the skip input
    i = g.index("layer2.0.add") + 1
    assert boundary_bytes(g, i) == g.nodes[i - 1].out_bytes
    j = g.index("layer2.1.conv2")
    assert boundary_bytes(g, j) == g.nodes[j - 1].out_bytes + g.nodes[g.index("layer2.0.add")].out_bytes


def test_amoebanet_cells_and_input_sizes():
    g = cnn_graph("amoebanet-d", GTX1070.gpu, batch=4, num_classes=10)
    assert g.nodes[0].out_bytes == 4 * 3 * 224 * 224 * 4            # seed 001: 2.408448 MB
    assert g.nodes[-1].out_bytes == 4 * 10 * 4                      # seed 001: 0.00016 MB
    concats = [n for n in g.nodes if n.op == "concat"]
    assert len(concats) == 2 + 3 * 4 + 2                            # 2 stem cells, 3 groups of 4, 2 reductions
    assert all(len(n.inputs) == 3 for n in concats)                 # states 4, 5, 6 of each cell
    small = cnn_graph("amoebanet-d", GTX1070.gpu, batch=1, input_name="cifar10", num_layers=1, filters=64)
    assert small.nodes[-1].out_bytes == 10 * 4


def test_gpt2_small_two_and_four_stages_are_balanced():
    s = load_scenario(GPT2_SCENARIO)
    g = transformer_graph(s)
    cl = cluster_from_system(s.system)
    for k in (2, 4):
        part = partition(g, k, cl, Options())
        r = build_report(g, part, cl, Options())
        im = r["imbalance"]
        # the split balances F + B; the head's cross-entropy is forward-heavy (38 of 52 bytes per
        # logit in the forward, costs/layers.py) and the embedding backward-heavy (its dense table
        # gradient added into the buffer), so F and B alone balance less well than the total
        assert im["sequential"]["forward"] >= 0.75 and im["sequential"]["backward"] >= 0.85
        assert im["stage_total"] >= 0.9
        lps = r["layers_per_stage"]
        assert sum(lps) == 12 and len(lps) == k
        # the result feeds a scenario with uneven layers per stage
        fed = load_scenario(GPT2_SCENARIO, [f"parallel.pipeline={k}", f"parallel.layers_per_stage={lps}",
                                            "system.num_nodes=1", "system.gpus_per_node=4",
                                            f"parallel.data={4 // k}", f"training.global_batch_size={4 // k * 4}"])
        assert fed.layers_per_stage() == tuple(lps)


def test_gpt2_node_costs_are_the_cost_models():
    from pipesim.costs import stage_costs
    s = load_scenario(GPT2_SCENARIO, ["parallel.pipeline=1", "parallel.data=4", "training.global_batch_size=4"])
    g = transformer_graph(s)
    (whole,) = stage_costs(s)
    assert sum(n.fwd for n in g.nodes) == pytest.approx(whole.forward, rel=1e-9)
    assert sum(n.bwd for n in g.nodes) == pytest.approx(whole.backward, rel=1e-9)
    assert sum(n.flops for n in g.nodes) == pytest.approx(whole.flops, rel=1e-9)


@pytest.mark.parametrize("recompute", [True, False])
def test_amoebanet_four_stages_balanced(recompute):
    g = cnn_graph("amoebanet-d", GTX1070.gpu, batch=4, num_classes=10)
    cl = cluster_from_system(GTX1070)
    opts = Options(recompute=recompute)
    r = build_report(g, partition(g, 4, cl, opts), cl, opts)
    assert r["imbalance"]["stage_total"] >= 0.9
    if recompute:                                      # the seed's configuration
        assert r["imbalance"]["sequential"]["forward"] >= 0.9
        assert r["imbalance"]["sequential"]["backward"] >= 0.9
    assert r["cut_edges"] == len(cut_edges(g, r["bounds"])) >= 3


def test_block_granularity_splits_inside_layers():
    s = load_scenario(GPT2_SCENARIO)
    g = transformer_graph(s, "block")
    assert len(g) == 2 + 2 * 12 + 1
    layer = transformer_graph(s)
    assert sum(n.fwd for n in g.nodes) == pytest.approx(sum(n.fwd for n in layer.nodes), rel=1e-9)
    # a split after an attention half does not map onto layers_per_stage
    cut = g.index("layer3.attn") + 1
    assert layers_per_stage(g, (0, cut, len(g))) == ()
    cut = g.index("layer3.mlp") + 1
    assert layers_per_stage(g, (0, cut, len(g))) == (4, 8)


def test_cnn_stage_costs_feed_the_simulator_records():
    from pipesim.partition.cnn_stages import cnn_stage_costs
    g = cnn_graph("mobilenetv2", GTX1070.gpu, batch=32, input_name="cifar10")
    one = cnn_stage_costs("mobilenetv2", system=GTX1070, micro_batch_size=32, input_name="cifar10")
    assert len(one) == 1
    assert one[0].forward == pytest.approx(sum(n.fwd for n in g.nodes))
    assert one[0].params == sum(n.params for n in g.nodes)
    assert one[0].send_bytes == 0 and one[0].has_head and one[0].has_embedding
    four = cnn_stage_costs("mobilenetv2", system=GTX1070, micro_batch_size=32, input_name="cifar10",
                           pipeline=4, activation_compression_bits=8)
    assert sum(s.forward for s in four) == pytest.approx(one[0].forward)
    assert sum(s.layers for s in four) == len(g) - 1
    # stage k sends what stage k+1 receives, compressed by bits/16 (costs/stage.py); gradients are not
    for a, b in zip(four, four[1:]):
        assert b.grad_send_bytes == pytest.approx(a.send_bytes * 16 / 8)
        assert a.quantize > 0 and b.dequantize > 0
    fixed = cnn_stage_costs("mobilenetv2", system=GTX1070, micro_batch_size=32, input_name="cifar10",
                            pipeline=2, nodes_per_stage=(10, len(g) - 11), recompute="full")
    assert fixed[0].layers == 10 and fixed[0].recompute == pytest.approx(fixed[0].forward)
    assert fixed[1].activation_bytes == pytest.approx(fixed[0].send_bytes)   # keeps only its input


def test_cnn_report_nodes_per_stage_round_trip():
    from pipesim.partition.cnn_stages import cnn_stage_costs
    g = cnn_graph("resnet50", GTX1070.gpu, batch=8, input_name="cifar10")
    cl = cluster_from_system(GTX1070)
    part = partition(g, 3, cl)
    r = build_report(g, part, cl, Options())
    costs = cnn_stage_costs("resnet50", system=GTX1070, micro_batch_size=8, input_name="cifar10", pipeline=3,
                            nodes_per_stage=r["nodes_per_stage"])
    th = r["theoretical"]["sequential"]
    assert [c.forward for c in costs] == pytest.approx(th["forward_s"])
    assert [c.backward for c in costs] == pytest.approx(th["backward_s"])
    assert [c.grad_send_bytes for c in costs[1:]] == pytest.approx([c["grad_out_bytes"] for c in r["communication"][1:]])


def test_transformer_split_round_trips_through_stage_costs():
    from pipesim.costs import stage_costs
    s = load_scenario(GPT2_SCENARIO)
    g = transformer_graph(s)
    cl = cluster_from_system(s.system)
    r = build_report(g, partition(g, 4, cl), cl, Options())
    fed = load_scenario(GPT2_SCENARIO, [f"parallel.layers_per_stage={r['layers_per_stage']}"])
    costs = stage_costs(fed)
    assert [c.forward for c in costs] == pytest.approx(r["theoretical"]["sequential"]["forward_s"], rel=1e-9)
    assert [c.backward for c in costs] == pytest.approx(r["theoretical"]["sequential"]["backward_s"], rel=1e-9)
    assert [c.send_bytes for c in costs[:-1]] == pytest.approx([c["output_bytes"] for c in r["communication"][:-1]])


def test_kernel_launch_overhead_when_the_gpu_spec_has_one():
    import dataclasses

    from pipesim.partition.cnn import cost_op
    # a synchronous host pays the launch on top of each kernel (GPUs overlap it: tested in costs)
    gpu = dataclasses.replace(GTX1070.gpu, kernel_launch=5e-6, launch_overlaps=False)
    plain = cnn_graph("mobilenetv2", dataclasses.replace(GTX1070.gpu, kernel_launch=0.0), batch=8,
                      input_name="cifar10")
    slow = cnn_graph("mobilenetv2", gpu, batch=8, input_name="cifar10")
    for a, b in zip(plain.nodes[1:], slow.nodes[1:]):
        ops = [cost_op(p, 8, 4) for p in a.spec[1]]
        # a primitive with no work in a pass launches nothing in it
        assert b.fwd - a.fwd == pytest.approx(5e-6 * sum(1 for o in ops if o.flops_fwd or o.bytes_fwd))
        # backward: two kernels (input and weight gradients) for primitives with weights
        assert b.bwd - a.bwd == pytest.approx(5e-6 * sum(2 if o.dgrad_fraction < 1 else 1 for o in ops
                                                         if o.flops_bwd or o.bytes_bwd))


def test_cnn_stage_costs_for_reads_a_cnn_model_section():
    # The adapter stage_costs would call once ModelConfig has arch: cnn (fields cnn, image_input,
    # num_classes, cnn_options); stand in for that model section with a namespace.
    import dataclasses
    from types import SimpleNamespace

    from pipesim.partition.cnn_stages import cnn_stage_costs, cnn_stage_costs_for
    base = load_scenario(GPT2_SCENARIO, ["parallel.pipeline=2", "parallel.data=2", "training.micro_batch_size=8",
                                         "training.global_batch_size=32"])
    model = SimpleNamespace(name="mobilenetv2", cnn="mobilenetv2", image_input="cifar10", num_classes=10, cnn_options={})
    s = dataclasses.replace(base, model=model)
    got = cnn_stage_costs_for(s)
    want = cnn_stage_costs("mobilenetv2", system=base.system, micro_batch_size=8, pipeline=2, data=2,
                           input_name="cifar10", num_classes=10)
    assert [c.forward for c in got] == pytest.approx([c.forward for c in want])
    assert len(got) == 2 and got[0].has_embedding and got[1].has_head
