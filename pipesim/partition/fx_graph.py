"""Any torch.nn.Module with an example input as a partition graph.

torch.fx symbolic tracing gives one node per leaf-module call, function or method call; when a
module cannot be traced (data-dependent control flow), its direct children are taken as a chain
run in registration order. Every node is run once on the example input to learn its output
tensor (edge bytes); per-node costs are either measured on this machine (forward and backward
wall time) or estimated: FLOPs counted by torch.utils.flop_counter (matmuls, convolutions,
attention; forward and backward) on the roofline of the chosen GPU, plus the memory traffic of
reading the inputs and writing the output (the roofline rule of costs/roofline.py).
"""
from __future__ import annotations

import importlib
import statistics
import time

from pipesim.costs.ops import Op
from pipesim.costs.roofline import CostModel
from pipesim.errors import PipesimError
from pipesim.partition.graph import Graph, Node


def load_factory(spec: str):
    """`package.module:factory` -> (module, example input tuple)."""
    if ":" not in spec:
        raise PipesimError(f"module:{spec}: expected module:package.module:factory")
    mod_name, attr = spec.rsplit(":", 1)
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise PipesimError(f"module:{spec}: cannot import {mod_name} ({exc})") from None
    factory = getattr(mod, attr, None)
    if factory is None:
        raise PipesimError(f"module:{spec}: {mod_name} has no attribute {attr!r}")
    try:
        made = factory() if callable(factory) else factory
    except Exception as exc:                     # user code: report it, do not dump a traceback
        raise PipesimError(f"module:{spec}: the factory raised {type(exc).__name__}: {exc}") from None
    if isinstance(made, tuple) and len(made) == 2:
        module, example = made
    else:
        module, example = made, getattr(made, "example_input", None)
    import torch
    if not isinstance(module, torch.nn.Module):
        raise PipesimError(f"module:{spec}: the factory must return an nn.Module (or (module, example_input))")
    if example is None:
        raise PipesimError(f"module:{spec}: no example input; return (module, example_input) from the factory")
    return module, example if isinstance(example, tuple) else (example,)


def _tensors(x):
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _tensors(item)]
    if isinstance(x, dict):
        return [t for item in x.values() for t in _tensors(item)]
    return []


def _nbytes(x) -> float:
    return float(sum(t.numel() * t.element_size() for t in _tensors(x)))


def _fx_nodes(module, n_inputs: int):
    """[(name, op, input names, callable factory)] from torch.fx, or None if tracing fails."""
    import torch.fx as fx
    try:
        gm = fx.symbolic_trace(module)
    except Exception:                               # any tracing failure -> children fallback
        return None
    attrs = {}
    items, outputs, placeholders = [], [], []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            placeholders.append(node.name)
            items.append((node.name, "input", (), None))
        elif node.op == "get_attr":
            obj = gm
            for part in node.target.split("."):
                obj = getattr(obj, part)
            attrs[node.name] = obj
        elif node.op == "output":
            outputs = [a.name for a in _arg_nodes(node.args) if a.name not in attrs]
        else:
            deps = []
            for a in _arg_nodes((node.args, node.kwargs)):
                if a.name not in attrs and a.name not in deps:
                    deps.append(a.name)
            items.append((node.name, _label(gm, node), tuple(deps), _caller(gm, node, deps, attrs)))
    if len(placeholders) != n_inputs:
        raise PipesimError(f"the module takes {len(placeholders)} inputs, the example gives {n_inputs}")
    return items, outputs


def _arg_nodes(args):
    import torch.fx as fx
    found = []
    fx.node.map_arg(args, lambda n: found.append(n) or n)
    return found


def _label(gm, node) -> str:
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)).__name__
    return getattr(node.target, "__name__", str(node.target))


def _caller(gm, node, deps, attrs):
    """A factory for a torch module that runs this fx node on its inputs (in `deps` order)."""
    import torch
    import torch.fx as fx

    def make():
        class FxCall(torch.nn.Module):
            def __init__(self):
                super().__init__()
                if node.op == "call_module":
                    self.sub = gm.get_submodule(node.target)

            def forward(self, *xs):
                env = dict(zip(deps, xs))
                args = fx.node.map_arg(node.args, lambda n: env[n.name] if n.name in env else attrs[n.name])
                kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n.name] if n.name in env else attrs[n.name])
                if node.op == "call_module":
                    return self.sub(*args, **kwargs)
                if node.op == "call_function":
                    return node.target(*args, **kwargs)
                return getattr(args[0], node.target)(*args[1:], **kwargs)

        return FxCall()

    return make


def _children_nodes(module, n_inputs: int):
    children = list(module.named_children())
    if not children or n_inputs != 1:
        return None
    items = [("input", "input", (), None)]
    prev = "input"
    for name, child in children:
        safe = name.replace(".", "_")
        items.append((safe, type(child).__name__, (prev,), (lambda c=child: c)))
        prev = safe
    return items, [prev]


def _estimate(fn, inputs, out, cm: CostModel) -> tuple[float, float, float]:
    """(forward s, backward s, fwd+bwd FLOPs) from counted FLOPs and the input/output traffic."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    feed = [x.detach().requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in inputs]
    with FlopCounterMode(display=False) as fwd_counter:
        y = fn(*feed)
    f_flops = fwd_counter.get_total_flops()
    b_flops = 0.0
    outs = [t for t in _tensors(y) if t.requires_grad]
    if outs:
        with FlopCounterMode(display=False) as bwd_counter:
            torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
        b_flops = bwd_counter.get_total_flops()
    traffic = _nbytes(inputs) + _nbytes(out)
    # Matmul-class FLOPs on the tensor roof, the rest as memory traffic (forward reads inputs and
    # writes the output; the backward moves about twice that).
    f = cm.time(Op("fx", "matmul", f_flops, 0, 0, 0), "fwd").seconds + cm.memory_time(traffic)
    b = cm.time(Op("fx", "matmul", 0, b_flops, 0, 0), "bwd").seconds + cm.memory_time(2 * traffic)
    return f, b, float(f_flops + b_flops)


def _measure(fn, inputs, runs: int = 3) -> tuple[float, float]:
    import torch
    fts, bts = [], []
    for i in range(runs + 1):
        feed = [x.detach().requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                for x in inputs]
        t0 = time.perf_counter()
        y = fn(*feed)
        t1 = time.perf_counter()
        outs = [t for t in _tensors(y) if t.requires_grad]
        if outs:
            torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
        t2 = time.perf_counter()
        if i:
            fts.append(t1 - t0)
            bts.append(t2 - t1)
    return statistics.fmean(fts), statistics.fmean(bts)


def module_graph(module, example: tuple, gpu, precision: str = "fp32", measure: bool = False,
                 name: str = "module", profile=None) -> Graph:
    import torch
    traced = _fx_nodes(module, len(example))
    how = "fx"
    if traced is None:
        traced = _children_nodes(module, len(example))
        how = "children"
        if traced is None:
            raise PipesimError(f"{name}: torch.fx cannot trace it and it has no children to run in sequence")
    items, outputs = traced
    cm = CostModel(gpu, precision, profile)
    module.train()
    values, nodes, seen_params = {}, [], set()
    inputs = iter(example)
    for node_name, label, deps, factory in items:
        if label == "input":
            x = next(inputs)
            values[node_name] = x
            nodes.append(Node(node_name, "input", out_bytes=_nbytes(x),
                              grad=isinstance(x, torch.Tensor) and x.is_floating_point(), spec=("fx_input", x)))
            continue
        fn = factory()
        args = [values[d] for d in deps]
        try:
            with torch.no_grad():
                out = fn(*args)
        except Exception as exc:
            raise PipesimError(f"{name}: node {node_name} ({label}) fails on the example input "
                               f"({how} graph): {exc}") from None
        values[node_name] = out
        params = 0.0
        for p in fn.parameters():
            if id(p) not in seen_params:
                seen_params.add(id(p))
                params += p.numel()
        if measure:
            f, b = _measure(fn, args)
            flops = 0.0
        else:
            f, b, flops = _estimate(fn, args, out, cm)
        floating = any(t.is_floating_point() for t in _tensors(out))
        nodes.append(Node(node_name, label, deps, fwd=f, bwd=b, flops=flops, params=params,
                          out_bytes=_nbytes(out), saved_bytes=_nbytes(args), grad=floating,
                          spec=("fx", factory)))
    meta = dict(kind="module", traced_with=how, batch=None, precision=precision,
                costs="measured on this machine" if measure else f"roofline on {gpu.name}"
                + (" with a calibrated profile" if profile is not None else ""))
    return Graph(name, tuple(nodes), outputs=tuple(outputs), meta=meta)
