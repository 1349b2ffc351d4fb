"""A region: one supported part of an ATen graph, compiled by sinkgraph.

The partitioner (partition.py) cuts AOTAutograd's graph into regions whose
every node has a converter; each region becomes one ``Region``: the C++
``CompiledGraph`` (trace once per guard set, passes, capture per graph key,
replay) driven by ``RegionRunner``, which the C++ tracer calls back to walk
the region's FX nodes and run their converters on traced tensors.
"""

import operator
import re

import torch
import torch.utils.dlpack

from . import _C
from . import converters as cv
from ._log import info

# Input kinds, as the C++ IR names them (docs/ir.md).
PARAM, INPUT = "param", "input"

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.int32: "i32", torch.int64: "i64", torch.bool: "bool"}


def supported_dtype(dtype):
    return dtype in _DTYPES


def to_sg(t):
    """A torch tensor's memory as a sinkgraph tensor, without a copy."""
    if not t.is_contiguous() and any(s < 0 for s in t.stride()):
        t = t.contiguous()
    return _C.from_dlpack(torch.utils.dlpack.to_dlpack(t))


# torch's own entry for a DLPack capsule: the public from_dlpack first checks
# for the __dlpack__ protocol, which a capsule does not have.
_from_dlpack = getattr(torch._C, "_from_dlpack", torch.utils.dlpack.from_dlpack)


def to_torch(t):
    return _from_dlpack(_C.to_dlpack(t))


def _inplace_writes(graph):
    """Note [Writes into graph inputs]

    AOTAutograd (keep_inference_input_mutations) ends an inference graph that
    mutates an input with ``copy_(input, new_value)``. When ``new_value`` is an
    ``index_copy`` of that same input (a KV cache written at a position) and
    nothing reads the input's old value after the index_copy, the write can go
    straight into the input's memory: the converter writes in place and the
    copy_ disappears, so a decode step is one replay with no copy of the cache.
    Other readers of the index_copy's result (the attention that reads the
    cache, as transformers' StaticCache.update returns it) read the input
    after the write: the converter's result is the write's own result
    (docs/ir.md, "In-place operators"), so they depend on it.
    Returns {index_copy node: placeholder} for the pairs where that holds.
    """
    order = {n: i for i, n in enumerate(graph.nodes)}
    out = {}
    for node in graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten.copy_.default:
            continue
        dst, src = node.args[0], node.args[1]
        if (dst.op != "placeholder" or not isinstance(src, torch.fx.Node) or
                src.target is not torch.ops.aten.index_copy.default or src.args[0] is not dst):
            continue
        later = [u for u in dst.users if u is not node and u is not src and order[u] > order[src]]
        if not later:
            out[src] = dst
    return out


class RegionRunner:
    """The function the C++ tracer calls: the region's converters on traced tensors."""

    def __init__(self, gm):
        self.gm = gm
        self.graph = gm.graph
        self.inplace = _inplace_writes(self.graph)
        # Note [Output layouts per shape]: which outputs are tensors and the
        # values of the others (sizes computed in the region) are read off
        # each trace, so they are kept per input shapes: a size from one
        # shape's trace must never answer a call of another shape.
        self.output_layouts = {}

    @staticmethod
    def shape_key(values):
        return tuple(tuple(v.shape) if not isinstance(v, int) else v for v in values)

    def __call__(self, inputs):
        env = {}
        placeholders = iter(inputs)
        written = set()  # index_copy nodes already written into their input

        def load(a):
            return torch.fx.node.map_arg(a, lambda n: env[n])

        outputs = None
        for node in self.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(placeholders)
            elif node.op == "get_attr":
                t = getattr(self.gm, node.target)
                env[node] = to_sg(t) if isinstance(t, torch.Tensor) else t
            elif node.op == "call_function":
                env[node] = self._call(node, load(node.args), load(node.kwargs), written)
            elif node.op == "output":
                outputs = load(node.args[0])
        single = not isinstance(outputs, (list, tuple))
        if single:
            outputs = [outputs]
        layout, tensors = [], []
        for o in outputs:
            if isinstance(o, _C.Tensor):
                layout.append(len(tensors))
                # Note [Output strides]: a region's outputs are contiguous.
                # A converter may end in a view (softmax over another dim
                # transposes there and back); captured graphs copy their
                # outputs into fresh buffers, but eager mode and calls past
                # the capture limit return what the converters returned.
                tensors.append(o if o.is_contiguous() else cv.sg_op("contiguous", [o]))
            else:
                layout.append(("const", o))
        self.output_layouts[self.shape_key(inputs)] = (single, layout)
        return tensors

    def _call(self, node, args, kwargs, written):
        target = node.target
        if target is operator.getitem:
            seq, index = args
            return seq[index]
        if node in self.inplace:
            written.add(node)
            return cv.indexing.index_copy_into(*args, **kwargs)
        if target is torch.ops.aten.copy_.default and node.args[1] in written:
            return args[0]  # already written in place
        converter = cv.lookup(target)
        if converter is None:  # the partitioner only hands us supported nodes
            raise _C.Error(f"{node.format_node()}: no converter (internal: a region holds it)")
        try:
            return converter(*args, **kwargs)
        except cv.Unsupported as e:
            raise _C.Error(f"{node.format_node()}: sinkgraph's converter for {target} cannot "
                           f"run this call: {e}") from None


def _output_orders(gm):
    """Per output: the dim order (outermost first) torch's meta gives it, or None
    when that is the contiguous order or not known statically."""
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0]
    outs = out if isinstance(out, (list, tuple)) else [out]
    orders = []
    for o in outs:
        val = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
        order = None
        if isinstance(val, torch.Tensor) and val.ndim > 1:
            strides, sizes = list(val.stride()), list(val.shape)
            if any(not isinstance(v, int) for v in strides + sizes):
                strides = None  # symbolic: int() would specialize it (a Dynamo guard)
            if strides is not None and min(sizes) > 0:
                dims = [d for d in range(val.ndim) if sizes[d] != 1]
                ranked = sorted(dims, key=lambda d: -strides[d])
                if ranked != dims:  # a permuted layout (a transpose, channels_last)
                    order = sorted(range(val.ndim), key=lambda d: (-strides[d], d))
        orders.append(order)
    return orders


class Region:
    """One compiled region: called with torch values, returns torch values."""

    def __init__(self, gm, kinds, config, name):
        self.name = name
        # The outer FX module calls the region as a function: FX's code
        # generation names a call target by __name__.
        self.__name__ = "sinkgraph_region_" + re.sub(r"\W", "_", name)
        self.runner = RegionRunner(gm)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        mutated = {n.args[0] for n in gm.graph.nodes
                   if n.op == "call_function" and n.target is torch.ops.aten.copy_.default}
        arg_names, param_args = [], []
        for i, ph in enumerate(placeholders):
            kind = kinds[i]
            arg_names.append(("p_" if kind == PARAM else "in_") + ph.name)
            if kind == PARAM and ph not in mutated:
                param_args.append(i)
        self.out_orders = _output_orders(gm)
        # Note [Shape keys in the PyTorch front end]
        # Converters read concrete shapes, so each input shape (and each value
        # of a SymInt input) is its own traced graph, i.e. its own graph key:
        # one Dynamo graph with dynamic shapes serves every size, and each size
        # is traced and captured once. capture_limit bounds those keys as
        # TorchAir's does: past it, calls of a new shape run eagerly (through
        # the same converters, uncaptured) and count in
        # eager_fallback_due_to_capture_limit.
        options = [(k, v) for k, v in config.cxx_options() if k != "recompile_limit"]
        options.append(("recompile_limit", str(config.capture_limit)))
        self.graph = _C.CompiledGraph(self.runner, options, name, arg_names, param_args)
        # Note [Torch arguments in one call] (python/src/module.cpp): the C++
        # side binds arguments and returns torch tensors, through these.
        self.graph.bind_torch(torch.Tensor, torch.utils.dlpack.to_dlpack, _from_dlpack)
        self._plain_single = None  # see __call__
        self._plan = None  # see use_plan
        info(f"region @{name}: compiled for mode {config.mode}: "
             f"{sum(1 for n in gm.graph.nodes if n.op == 'call_function')} ATen nodes, "
             f"{len(placeholders)} inputs ({len(param_args)} params)")

    def _plain(self, single, layout):
        """True when every output is a tensor, in order, with contiguous strides:
        the region's outputs are then returned as they come."""
        return (layout == list(range(len(layout))) and
                all(o is None for o in self.out_orders[:len(layout)]))

    def use_plan(self, plan):
        """Called from then on with the whole ATen graph's inputs: `plan` gives,
        per region argument, an index into them or a constant tensor (Note
        [Arguments by plan], python/src/module.cpp)."""
        self.graph.set_plan(plan)
        self._plan = list(plan)

    def _region_args(self, args):
        if self._plan is None:
            return args
        return [args[p] if isinstance(p, int) else p for p in self._plan]

    def __call__(self, *args):
        return self._finish(self.graph.call_torch(args), args)

    def call_list(self, args):
        """The outputs as a list, for a boxed call of a graph that is this region alone."""
        outs = self.graph.call_torch(args)
        if self._plain_single and len(self.runner.output_layouts) == 1:
            return outs
        result = self._finish(outs, args)
        return list(result) if isinstance(result, tuple) else [result]

    def _finish(self, outs, args):
        """Torch's view of the outputs: constants put back, strides restored."""
        layouts = self.runner.output_layouts
        if len(layouts) == 1:
            # One shape traced so far: its layout never changes (another shape
            # adds a second entry), so whether it is plain is decided once.
            single, layout = next(iter(layouts.values()))
            if self._plain_single is None:
                self._plain_single = self._plain(single, layout)
            if self._plain_single:
                return outs[0] if single else tuple(outs)
        else:
            single, layout = layouts[RegionRunner.shape_key(self._region_args(args))]
        result = []
        for k, s in enumerate(layout):
            if not isinstance(s, int):
                result.append(s[1])
                continue
            t = outs[s]
            order = self.out_orders[k]
            if order is not None and t.ndim == len(order):
                # Note [Output strides]: torch code after the region (a
                # fallback as_strided, a view) may rely on the strides its
                # meta gave this output; sinkgraph's are contiguous.
                strided = torch.empty_permuted(t.shape, order, dtype=t.dtype)
                strided.copy_(t)
                t = strided
            result.append(t)
        return result[0] if single else tuple(result)

    def counters(self):
        c = self.graph.counters()
        c["eager_fallback_due_to_capture_limit"] += self.graph.eager_calls()
        return c

    def explain(self):
        return self.graph.explain().rstrip()
