"""get_backend(): sinkgraph as a torch.compile backend.

The backend has torch.compile's contract, ``backend(gm, example_inputs) ->
callable``. As TorchAir's ``_npu_backend`` does, it lowers the FX graph to
ATen with AOTAutograd (inference only) and gives AOTAutograd a forward
compiler that converts each ATen node to sinkgraph IR (converters.py) and
compiles the IR with the config's mode (sinkgraph._C.CompiledGraph: trace
once per guard set, passes, capture, replay).
"""

import copy
import functools
import inspect
import operator
import re

import torch
import torch.utils.dlpack

from . import _C
from . import converters as cv
from .config import CompilerConfig

try:  # torch >= 2.0
    from torch._functorch.aot_autograd import aot_module_simplified
except ImportError:  # torch 1.13
    from functorch.compile import aot_module_simplified

# The first placeholders of a graph handed to the backend that are the
# module's parameters and buffers (set by sinkgraph.compile; under
# torch.compile, AOTAutograd lifts the GraphModule's own).
PARAM_NAMES_ATTR = "_sinkgraph_param_names"

_VIEW_OPS = {
    torch.ops.aten.view.default, torch.ops.aten._reshape_alias.default,
    torch.ops.aten._unsafe_view.default, torch.ops.aten.select.int,
    torch.ops.aten.slice.Tensor, torch.ops.aten.permute.default,
    torch.ops.aten.transpose.int, torch.ops.aten.t.default, torch.ops.aten.expand.default,
    torch.ops.aten.unsqueeze.default, torch.ops.aten.squeeze.dim, torch.ops.aten.alias.default,
    torch.ops.aten.detach.default, torch.ops.aten.split.Tensor, operator.getitem,
}


def _to_sg(t):
    if not t.is_contiguous() and any(s < 0 for s in t.stride()):
        t = t.contiguous()
    return _C.from_dlpack(torch.utils.dlpack.to_dlpack(t))


def _to_torch(t):
    return torch.utils.dlpack.from_dlpack(_C.to_dlpack(t))


def _sanitize(name):
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _node_meta(node):
    """(dtype name, shape) of a node's tensor value, from the FX metadata."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return val.dtype, list(val.shape)
    tm = node.meta.get("tensor_meta")
    if tm is not None and hasattr(tm, "shape"):
        return tm.dtype, list(tm.shape)
    return None


_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.int32: "i32", torch.int64: "i64", torch.bool: "bool"}


def _constant_kind(v):
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, torch.dtype):
        return "dtype"
    if isinstance(v, torch.memory_format):
        return "memory_format"
    if isinstance(v, torch.layout):
        return "layout"
    if isinstance(v, torch.device):
        return "device"
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, bool) for x in v):
            return "bool_list"
        if all(isinstance(x, int) for x in v):
            return "int_list"
        if all(isinstance(x, (int, float)) for x in v):
            return "float_list"
    raise cv.Unsupported(f"an argument {v!r} that cannot be passed to libtorch")


_DTYPE_CODES = {torch.float32: 6, torch.float16: 5, torch.bfloat16: 15, torch.int32: 3,
                torch.int64: 4, torch.bool: 11}


# c10::MemoryFormat's values.
_MEMORY_FORMATS = {torch.contiguous_format: 0, torch.preserve_format: 1,
                   torch.channels_last: 2, torch.channels_last_3d: 3}


class _Fallback:
    """A node that runs its ATen operator through libtorch (Note [The libtorch fallback])."""

    def __init__(self, node, args, kwargs, stats, inplace=False):
        self.inplace = inplace
        self.node = node
        self.schema = node.target._schema
        self.args, self.kwargs = args, kwargs
        self.stats = stats

    def build(self, output_index, meta):
        try:
            return self._build(output_index, meta)
        except cv.Unsupported as e:
            raise _C.Error(f"{self.node.format_node()}: no converter, and the libtorch fallback "
                           f"cannot run it either: {e}") from None

    def _build(self, output_index, meta):
        if meta is None:
            raise cv.Unsupported(f"{self.node.target}: no shape metadata for its output")
        dtype, shape = meta
        if dtype not in _DTYPES:
            raise cv.Unsupported(f"{self.node.target}: output dtype {dtype}")
        tensors, spec = [], []
        values = list(self.args)
        for i, arg in enumerate(self.schema.arguments):
            if i < len(values):
                v = values[i]
            elif arg.name in self.kwargs:
                v = self.kwargs[arg.name]
            elif arg.has_default_value():
                v = arg.default_value
            else:
                raise cv.Unsupported(f"{self.node.target}: argument {arg.name} missing")
            if isinstance(v, _C.Tensor):
                spec.append(("tensor", len(tensors)))
                tensors.append(v)
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, _C.Tensor) for x in v):
                spec.append(("tensor_list", list(range(len(tensors), len(tensors) + len(v)))))
                tensors.extend(v)
            else:
                kind = _constant_kind(v)
                if kind == "dtype":
                    v = _DTYPE_CODES[v]
                elif kind == "memory_format":
                    v = _MEMORY_FORMATS[v]
                elif kind == "layout":
                    if v != torch.strided:
                        raise cv.Unsupported(f"{self.node.target}: layout {v}")
                    v = 0
                elif kind == "device":
                    if v.type != "cpu":
                        raise cv.Unsupported(f"{self.node.target}: device {v}")
                    v = "cpu"
                spec.append((kind, v))
        overload = self.node.target._overloadname
        fid = _C.register_torch_fallback(self.schema.name, "" if overload == "default" else overload,
                                         spec, output_index, _DTYPES[dtype], shape,
                                         self.inplace)
        self.stats["fallback_nodes"] += 1
        self.stats["fallback_ops"].add(str(self.node.target))
        return _C.op("torch_fallback", tensors, [fid])


class GraphRunner:
    """The function the C++ tracer calls: runs the ATen graph's converters on traced tensors.

    Note [In-place ATen calls]
    An in-place call (relu_, add_) is converted to its functional form. When
    it writes a graph input (or a view of one), the result is copied back
    with sinkgraph's copy_, which makes the input a mutated input. When it
    writes an intermediate that nobody reads afterwards except through this
    call's result, the result simply replaces it; otherwise it is copied
    back too, so every later reader sees the write.
    """

    def __init__(self, gm, mode, stats):
        self.gm = gm
        self.graph = gm.graph
        self.mode = mode
        self.stats = stats
        self.order = {n: i for i, n in enumerate(self.graph.nodes)}
        self.input_rooted = set()
        for n in self.graph.nodes:
            if n.op == "placeholder":
                self.input_rooted.add(n)
            elif n.op == "call_function" and n.target in _VIEW_OPS and n.args and \
                    n.args[0] in self.input_rooted:
                self.input_rooted.add(n)

    def _check_write(self, node):
        """An in-place write must reach the tensor torch writes (Copies in converters.py)."""
        n = node.args[0]
        while isinstance(n, torch.fx.Node):
            if n in self.copied:
                raise _C.Error(
                    f"{node.format_node()}: writes in place through {n.format_node()}, which "
                    "sinkgraph computes as a copy (a reshape of a strided tensor); the write "
                    "would be lost. Make the tensor contiguous before the view in the model")
            if n.op != "call_function" or n.target not in _VIEW_OPS or not n.args:
                break
            n = n.args[0]

    def missing_converters(self):
        missing = set()
        for n in self.graph.nodes:
            if n.op != "call_function" or n.target is operator.getitem:
                continue
            target = cv.INPLACE.get(n.target, n.target)
            if cv.lookup(target) is None:
                missing.add(str(n.target))
        return sorted(missing)

    def mutated_placeholders(self):
        """Placeholders an in-place call writes (through views too)."""
        out = set()
        roots = {}
        for n in self.graph.nodes:
            if n.op == "placeholder":
                roots[n] = n
            elif n.op == "call_function":
                if n.target in _VIEW_OPS and n.args and n.args[0] in roots:
                    roots[n] = roots[n.args[0]]
                writes = n.target in cv.INPLACE or n.target is torch.ops.aten.copy_.default
                if writes and n.args and n.args[0] in roots:
                    out.add(roots[n.args[0]])
        return out

    @staticmethod
    def _writes(node):
        if node.target is operator.getitem or not hasattr(node.target, "_schema"):
            return False
        return any(a.alias_info is not None and a.alias_info.is_write
                   for a in node.target._schema.arguments)

    def __call__(self, inputs):
        env = {}
        self.copied = set()
        placeholders = iter(inputs)
        self.stats["fallback_nodes"] = 0
        self.stats["fallback_ops"] = set()

        def load(a):
            return torch.fx.node.map_arg(a, lambda n: env[n])

        outputs = None
        for node in self.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(placeholders)
            elif node.op == "get_attr":
                t = functools.reduce(getattr, node.target.split("."), self.gm)
                env[node] = _to_sg(t) if isinstance(t, torch.Tensor) else t
            elif node.op == "call_function":
                if not node.users and not self._writes(node):
                    env[node] = None  # unused (an empty buffer batch_norm returns)
                    continue
                env[node] = self._call(node, load(node.args), load(node.kwargs), env)
            elif node.op == "output":
                outputs = load(node.args[0])
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        self.output_layout = []
        tensors = []
        for o in outputs:
            if isinstance(o, _C.Tensor):
                self.output_layout.append(len(tensors))
                tensors.append(o)
            elif isinstance(o, _Fallback):
                self.output_layout.append(len(tensors))
                tensors.append(o.build(0, _node_meta(o.node)))
            else:
                self.output_layout.append(("const", o))
        return tensors

    def _call(self, node, args, kwargs, env):
        target = node.target
        if target is operator.getitem:
            seq, index = args
            if isinstance(seq, _Fallback):
                meta = None
                val = seq.node.meta.get("val")
                if isinstance(val, (list, tuple)) and isinstance(val[index], torch.Tensor):
                    meta = (val[index].dtype, list(val[index].shape))
                return seq.build(index, meta)
            v = seq[index]
            if v is None and node.users:
                raise _C.Error(f"{node.format_node()}: output {index} of {node.args[0].target} "
                               "is not computed by sinkgraph's converter")
            return v
        inplace_of = cv.INPLACE.get(target)
        functional = inplace_of or target
        converter = cv.lookup(functional)
        result = None
        reason = None
        if inplace_of is not None or target is torch.ops.aten.copy_.default:
            self._check_write(node)
        if converter is not None:
            cv.Copies.made = False
            try:
                result = converter(*args, **kwargs)
            except cv.Unsupported as e:
                reason = str(e)
            if cv.Copies.made and target in _VIEW_OPS:
                self.copied.add(node)
        else:
            reason = "no converter"
        if result is None:
            if self.mode == "max-autotune":
                raise _C.Error(f"max-autotune: {target} cannot be converted ({reason}); "
                               "max-autotune compiles the whole graph and has no libtorch "
                               "fallback (use reduce-overhead, or add a converter: "
                               "docs/architecture.md)")
            schema = target._schema
            writes = [a.name for a in schema.arguments if a.alias_info is not None and
                      a.alias_info.is_write]
            inplace = inplace_of is not None or writes == [schema.arguments[0].name]
            if writes and not inplace:
                raise _C.Error(f"{target} writes {', '.join(writes)} in place and has no "
                               "converter; the libtorch fallback runs operators that write at "
                               "most their first argument")
            fb = _Fallback(node, args, kwargs, self.stats, inplace)
            returns = schema.returns
            if inplace or (len(returns) == 1 and str(returns[0].type) == "Tensor"):
                result = fb.build(0, _node_meta(node))
                return self._write_back(node, args[0], result, env) if inplace else result
            return fb
        if inplace_of is not None:
            return self._write_back(node, args[0], result, env)
        return result

    def _write_back(self, node, dst, result, env):
        mutated = node.args[0]
        later_readers = [u for u in mutated.users if u is not node and
                         self.order[u] > self.order[node]]
        has_views = any(u.op == "call_function" and u.target in _VIEW_OPS for u in mutated.users)
        if mutated not in self.input_rooted and not later_readers and not has_views:
            env[mutated] = result
            return result
        return _C.op("copy_", [dst, result], [])



class CompiledForward:
    """The boxed callable a forward compiler returns: one ATen graph, compiled by sinkgraph."""

    _boxed_call = True

    def __init__(self, gm, config, num_params, param_names, name):
        self.config = config
        self.stats = {"fallback_nodes": 0, "fallback_ops": set()}
        self.runner = GraphRunner(gm, config.mode, self.stats)
        if config.mode == "max-autotune":
            missing = self.runner.missing_converters()
            if missing:
                raise _C.Error("max-autotune: no converter for " + ", ".join(missing) +
                               "; max-autotune compiles the whole graph and has no libtorch "
                               "fallback (use reduce-overhead, or add converters: "
                               "docs/architecture.md)")
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        mutated = self.runner.mutated_placeholders()
        arg_names, param_args = [], []
        for i, ph in enumerate(placeholders):
            if i < num_params:
                pname = param_names[i] if param_names and i < len(param_names) else ph.name
                arg_names.append("p_" + _sanitize(pname))
                if ph not in mutated:
                    param_args.append(i)
            else:
                arg_names.append("in" + str(i - num_params))
        self.num_params = num_params
        self.graph = _C.CompiledGraph(self.runner, config.cxx_options(), name, arg_names,
                                      param_args)
        self._cached = [None] * num_params  # (torch tensor, data_ptr, sinkgraph tensor)

    def _wrap(self, i, t):
        if i < self.num_params:
            c = self._cached[i]
            ptr = t.data_ptr()
            if c is not None and c[0] is t and c[1] == ptr:
                return c[2]
            s = _to_sg(t)
            self._cached[i] = (t, ptr, s)
            return s
        return _to_sg(t)

    def __call__(self, args):
        sg_args = [self._wrap(i, a) for i, a in enumerate(args)]
        args.clear()  # boxed calling convention: the callee owns the list
        outs = self.graph(sg_args)
        result = []
        for slot in self.runner.output_layout:
            result.append(_to_torch(outs[slot]) if isinstance(slot, int) else slot[1])
        return result

    def counters(self):
        c = self.graph.counters()
        c["fallback_nodes"] = self.stats["fallback_nodes"]
        return c

    def explain(self):
        lines = [self.graph.explain().rstrip()]
        if self.stats["fallback_nodes"]:
            lines.append(f"fallback nodes (run through libtorch): {self.stats['fallback_nodes']}"
                         f" ({', '.join(sorted(self.stats['fallback_ops']))})")
        else:
            lines.append("fallback nodes (run through libtorch): 0")
        return "\n".join(lines)


class Backend:
    """What get_backend returns: callable as backend(gm, example_inputs)."""

    def __init__(self, config, custom_decompositions):
        self.compiler_config = config
        self.custom_decompositions = dict(custom_decompositions or {})
        self.compiled = []  # every CompiledForward this backend made

    def __call__(self, gm, example_inputs):
        param_names = getattr(gm, PARAM_NAMES_ATTR, None)
        if param_names is not None:
            num_params = len(param_names)
        else:  # torch.compile: AOTAutograd lifts the module's parameters and buffers first
            param_names = [n for n, _ in gm.named_parameters()] + \
                          [n for n, _ in gm.named_buffers()]
            num_params = len(param_names)
        config = self.compiler_config
        name = f"graph{len(self.compiled)}"

        def fw_compiler(fw_gm, _fw_inputs):  # AOTAutograd's contract; metadata is on the nodes
            compiled = CompiledForward(fw_gm, config, num_params, param_names, name)
            self.compiled.append(compiled)
            return compiled

        # AOTAutograd wants tuple outputs (Dynamo's graphs have them); a
        # GraphModule returning one tensor is wrapped and unwrapped.
        output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        single = not isinstance(output.args[0], (tuple, list))
        if single:
            graph = copy.deepcopy(gm.graph)
            gm = torch.fx.GraphModule(gm, graph)
            output = next(n for n in reversed(graph.nodes) if n.op == "output")
            output.args = ((output.args[0],),)
            gm.recompile()
        compiled = _aot(gm, example_inputs, fw_compiler, self.custom_decompositions)
        if not single:
            return compiled
        return lambda *args: compiled(*args)[0]


def _aot(gm, example_inputs, fw_compiler, decompositions):
    params = inspect.signature(aot_module_simplified).parameters
    if "args" in params:  # torch >= 2.0
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler,
                                     decompositions=decompositions)
    compiled = aot_module_simplified(gm, fw_compiler=fw_compiler, decompositions=decompositions)

    def call(*args):
        # torch 1.13's AOTAutograd traces on the first call, by default with
        # the caller's real tensors: an in-place operator in the graph would
        # then write the caller's inputs once while tracing, and again when
        # the compiled graph runs. Trace with fake tensors instead (torch 2.x
        # always does).
        from functorch._src import config as aot_config
        old = aot_config.use_fake_tensor
        aot_config.use_fake_tensor = True
        try:
            return compiled(*args)
        finally:
            aot_config.use_fake_tensor = old

    return call


def get_backend(compiler_config=None, custom_decompositions=None):
    """sinkgraph's torch.compile backend for `compiler_config` (default: CompilerConfig())."""
    if compiler_config is None:
        compiler_config = CompilerConfig()
    if not isinstance(compiler_config, CompilerConfig):
        raise TypeError("get_backend: compiler_config must be a sinkgraph.CompilerConfig, not "
                        f"{type(compiler_config).__name__}")
    return Backend(compiler_config.copy(), custom_decompositions)


