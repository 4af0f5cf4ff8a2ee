"""CNN presets as layer graphs: AmoebaNet-D, ResNet-50/101, MobileNetV2 (with skip connections).

Each node is a short chain of primitives (cnn_layers.py) after an optional merge of its inputs
(add for residuals, concat for cell outputs); nodes carry shapes, FLOPs, parameters, activation
bytes and roofline times on the chosen GPU. Architectures:
- ResNet-50/101: He et al. 2016, "Deep Residual Learning", Table 1 (bottleneck blocks [3,4,6,3] /
  [3,4,23,3], widths 64-512 x4), projection shortcuts on the first block of a stage (option B);
  stride on the 3x3 conv (the torchvision "v1.5" placement).
- MobileNetV2: Sandler et al. 2018, Table 2 (t, c, n, s rows), inverted residuals with linear
  bottlenecks (Table 1), residual add when stride 1 and widths match.
- AmoebaNet-D: Real et al. 2019, "Regularized Evolution for Image Classifier Architecture
  Search", Fig. 8 / Appendix (AmoebaNet-D normal and reduction cells: five pairwise combinations
  of ops over the two previous cell outputs, the unused states concatenated), as built for
  pipelining in torchgpipe (Kim et al. 2020, Sec. 4: AmoebaNet-D(L, D) with L normal cells per
  group and D filters; 1x1 preprocessing, C/4 bottlenecks in the 3x3 and 1x7/7x1 convs).
CIFAR inputs (32x32) use stride-1 stems (and no stem max-pool), as CIFAR variants of these
networks do (He et al. 2016, Sec. 4.2; Sandler et al. 2018 keep ImageNet strides; the usual
CIFAR port drops the first two strides).
"""
from __future__ import annotations

from math import prod

from pipesim.costs.roofline import CostModel
from pipesim.errors import PipesimError
from pipesim.partition.cnn_layers import Prim, cost_op, make
from pipesim.partition.graph import Graph, Node
from pipesim.scenario.config import BYTES_PER_ELEMENT
from pipesim.scenario.system_config import GPUSpec

INPUTS = {"cifar10": ((3, 32, 32), 10), "imagenet": ((3, 224, 224), 1000)}


class Builder:
    """Adds nodes as primitive chains, tracking each node's output shape."""

    def __init__(self, input_shape):
        self.shapes: dict[str, tuple[int, ...]] = {"input": tuple(input_shape)}
        self.nodes: list[tuple[str, tuple[str, ...], tuple[Prim, ...]]] = []
        self.counter = 0

    def add(self, name: str, inputs, *steps) -> str:
        """steps: (kind, kwargs) pairs; the first may be ("add",) / ("concat",) over all inputs."""
        inputs = tuple([inputs] if isinstance(inputs, str) else inputs)
        shapes = [self.shapes[i] for i in inputs]
        prims = []
        for step in steps:
            kind, kw = step[0], (step[1] if len(step) > 1 else {})
            pr = make(kind, shapes if not prims else [prims[-1].out_shape], **kw)
            prims.append(pr)
        if len(inputs) > 1 and prims[0].kind not in ("add", "concat"):
            raise ValueError(f"node {name}: several inputs need an add or concat first")
        self.shapes[name] = prims[-1].out_shape
        self.nodes.append((name, inputs, tuple(prims)))
        return name

    def shape(self, name: str) -> tuple[int, ...]:
        return self.shapes[name]


def conv_bn(cout, k=1, s=1, p=0, groups=1, act="relu"):
    steps = [("conv", dict(cout=cout, k=k, s=s, p=p, groups=groups)), ("bn",)]
    if act:
        steps.append((act,))
    return steps


# ---------------------------------------------------------------- ResNet

def resnet(b: Builder, blocks, num_classes: int, cifar: bool) -> str:
    if cifar:
        x = b.add("stem", "input", *conv_bn(64, k=3, s=1, p=1))
    else:
        x = b.add("stem", "input", *conv_bn(64, k=7, s=2, p=3))
        x = b.add("maxpool", x, ("maxpool", dict(k=3, s=2, p=1)))
    for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
        for i in range(n):
            stride = 2 if (i == 0 and stage > 0) else 1
            name = f"layer{stage + 1}.{i}"
            a = b.add(f"{name}.conv1", x, *conv_bn(width))
            c = b.add(f"{name}.conv2", a, *conv_bn(width, k=3, s=stride, p=1))
            c = b.add(f"{name}.conv3", c, *conv_bn(4 * width, act=None))
            skip = x
            if i == 0:
                skip = b.add(f"{name}.downsample", x, *conv_bn(4 * width, s=stride, act=None))
            x = b.add(f"{name}.add", (c, skip), ("add",), ("relu",))
    return b.add("fc", x, ("gap",), ("flatten",), ("linear", dict(cout=num_classes)))


# ---------------------------------------------------------------- MobileNetV2

MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))     # Sandler et al. 2018, Table 2: t, c, n, s


def mobilenet_v2(b: Builder, num_classes: int, cifar: bool) -> str:
    x = b.add("stem", "input", *conv_bn(32, k=3, s=1 if cifar else 2, p=1, act="relu6"))
    for row, (t, c, n, s) in enumerate(MOBILENET_V2):
        if cifar and row == 1:
            s = 1
        for i in range(n):
            stride = s if i == 0 else 1
            cin = b.shape(x)[0]
            name = f"block{row}.{i}"
            y = x
            if t != 1:
                y = b.add(f"{name}.expand", y, *conv_bn(cin * t, act="relu6"))
            hidden = b.shape(y)[0]
            y = b.add(f"{name}.dw", y, *conv_bn(hidden, k=3, s=stride, p=1, groups=hidden, act="relu6"))
            y = b.add(f"{name}.project", y, *conv_bn(c, act=None))
            if stride == 1 and cin == c:
                y = b.add(f"{name}.add", (y, x), ("add",))
            x = y
    x = b.add("last", x, *conv_bn(1280, act="relu6"))
    return b.add("classifier", x, ("gap",), ("flatten",), ("dropout",), ("linear", dict(cout=num_classes)))


# ---------------------------------------------------------------- AmoebaNet-D

# (op, input state) pairs; consecutive pairs are summed into a new state (Real et al. 2019, Fig. 8).
AMOEBA_D_NORMAL = (("max_pool_3x3", 0), ("conv_1x1", 0), ("skip", 2), ("max_pool_3x3", 2),
                   ("skip", 0), ("conv_7x1_1x7", 1), ("conv_1x1", 1), ("conv_7x1_1x7", 1),
                   ("avg_pool_3x3", 0), ("conv_1x1", 3))
AMOEBA_D_REDUCE = (("max_pool_2x2", 1), ("max_pool_3x3", 1), ("conv_3x3", 0), ("skip", 2),
                   ("conv_7x1_1x7", 2), ("max_pool_3x3", 2), ("avg_pool_3x3", 2), ("conv_1x1", 3),
                   ("skip", 3), ("max_pool_2x2", 0))
AMOEBA_D_CONCAT = (4, 5, 6)


def _amoeba_op(op: str, c: int, stride: int) -> list:
    q = max(1, c // 4)
    relu_conv_bn = lambda cout, k, s, p: [("relu",), ("conv", dict(cout=cout, k=k, s=s, p=p)), ("bn",)]
    if op == "max_pool_3x3":
        return [("maxpool", dict(k=3, s=stride, p=1))]
    if op == "avg_pool_3x3":
        return [("avgpool", dict(k=3, s=stride, p=1))]
    if op == "max_pool_2x2":
        return [("maxpool", dict(k=2, s=stride, p=0))] if stride == 2 else [("maxpool", dict(k=3, s=1, p=1))]
    if op == "conv_1x1":
        return relu_conv_bn(c, 1, stride, 0)
    if op == "conv_3x3":
        return relu_conv_bn(q, 1, 1, 0) + relu_conv_bn(q, 3, stride, 1) + relu_conv_bn(c, 1, 1, 0)
    if op == "conv_7x1_1x7":
        return (relu_conv_bn(q, 1, 1, 0) + relu_conv_bn(q, (1, 7), (1, stride), (0, 3))
                + relu_conv_bn(q, (7, 1), (stride, 1), (3, 0)) + relu_conv_bn(c, 1, 1, 0))
    if op == "skip" and stride == 2:      # not in the D genotype; a strided 1x1 keeps shapes valid
        return relu_conv_bn(c, 1, 2, 0)
    raise ValueError(op)


def amoeba_cell(b: Builder, name: str, s0: str, s1: str, c: int, reduction: bool) -> str:
    genotype = AMOEBA_D_REDUCE if reduction else AMOEBA_D_NORMAL
    h0, h1 = b.shape(s0)[1], b.shape(s1)[1]
    stride0 = h0 // h1          # the previous cell reduced: bring s0 down to s1's size
    p0 = b.add(f"{name}.pre0", s0, ("relu",), ("conv", dict(cout=c, s=stride0)), ("bn",))
    p1 = b.add(f"{name}.pre1", s1, ("relu",), ("conv", dict(cout=c)), ("bn",))
    states = [p0, p1]
    for pair in range(5):
        branch = []
        for side in range(2):
            op, idx = genotype[2 * pair + side]
            stride = 2 if reduction and idx < 2 else 1
            if op == "skip" and stride == 1:
                branch.append(states[idx])
            else:
                branch.append(b.add(f"{name}.op{2 * pair + side}.{op}", states[idx], *_amoeba_op(op, c, stride)))
        states.append(b.add(f"{name}.add{pair}", branch, ("add",)))
    return b.add(f"{name}.concat", [states[i] for i in AMOEBA_D_CONCAT], ("concat",))


def amoebanet_d(b: Builder, num_classes: int, cifar: bool, num_layers: int = 4, filters: int = 512) -> str:
    f = filters
    stem = b.add("stem", "input", ("conv", dict(cout=f // 4, k=3, s=1 if cifar else 2, p=1)), ("bn",))
    s0, s1 = stem, stem
    plan = [(f // 4, True), (f // 2, True)]                  # the two stem reduction cells
    for group, width in enumerate((f, 2 * f, 4 * f)):
        if group:
            plan.append((width, True))
        plan += [(width, False)] * num_layers
    for i, (c, red) in enumerate(plan):
        s0, s1 = s1, amoeba_cell(b, f"cell{i}", s0, s1, c, red)
    return b.add("classifier", s1, ("relu",), ("gap",), ("flatten",), ("linear", dict(cout=num_classes)))


PRESETS = {
    "resnet50": lambda b, n, cifar: resnet(b, (3, 4, 6, 3), n, cifar),
    "resnet101": lambda b, n, cifar: resnet(b, (3, 4, 23, 3), n, cifar),
    "mobilenetv2": mobilenet_v2,
    "amoebanet-d": amoebanet_d,
}


def build_layers(preset: str, input_name: str = "imagenet", num_classes: int | None = None, **kw) -> Builder:
    if preset not in PRESETS:
        raise PipesimError(f"unknown CNN preset {preset!r}; known: {', '.join(PRESETS)}")
    if input_name not in INPUTS:
        raise PipesimError(f"--input {input_name}: expected one of {', '.join(INPUTS)}")
    shape, classes = INPUTS[input_name]
    b = Builder(shape)
    PRESETS[preset](b, num_classes or classes, input_name == "cifar10", **kw)
    return b


def cnn_graph(preset: str, gpu: GPUSpec, batch: int, precision: str = "fp32", input_name: str = "imagenet",
              num_classes: int | None = None, profile=None, **kw) -> Graph:
    """The preset as a partition graph with roofline times on `gpu` for a micro-batch of `batch`."""
    if batch < 1:
        raise PipesimError(f"--batch must be at least 1, got {batch}")
    b = build_layers(preset, input_name, num_classes, **kw)
    elem = BYTES_PER_ELEMENT[precision]
    cm = CostModel(gpu, precision, profile)
    # The cost model adds the GPU's fixed kernel-launch cost per primitive (two backward for
    # primitives with weights): small CNNs such as MobileNetV2 on CIFAR are launch-bound.
    nodes = [Node("input", "input", out_bytes=batch * prod(b.shapes["input"]) * elem, grad=False,
                  spec=("input", b.shapes["input"]))]
    for name, inputs, prims in b.nodes:
        ops = [cost_op(p, batch, elem) for p in prims]
        nodes.append(Node(
            name, "+".join(p.kind for p in prims), inputs,
            fwd=sum(cm.time(o, "fwd").seconds for o in ops),
            bwd=sum(cm.time(o, "bwd").seconds for o in ops),
            wgrad=sum(cm.time(o, "bwd").seconds * cm.wgrad_share(o) for o in ops),
            flops=sum(o.flops_fwd + o.flops_bwd for o in ops), params=sum(p.params for p in prims),
            out_bytes=batch * prod(prims[-1].out_shape) * elem,
            saved_bytes=sum(o.saved_bytes for o in ops), spec=("cnn", prims)))
    meta = dict(kind="cnn", preset=preset, input=input_name, batch=batch, precision=precision,
                input_shape=b.shapes["input"],
                costs=f"roofline on {gpu.name}" + (" with a calibrated profile" if profile is not None else ""))
    return Graph(preset, tuple(nodes), outputs=(nodes[-1].name,), meta=meta)
