"""sinkgraph as a torch.compile backend: get_backend() and the "sinkgraph" entry point.

The backend has torch.compile's contract, ``backend(gm, example_inputs) ->
callable``. As TorchAir's ``_npu_backend`` does, it hands Dynamo's FX graph to
AOTAutograd (``aot_module_simplified``) with the core ATen decompositions
(plus ``custom_decompositions``); AOTAutograd calls back with functional ATen
graphs: one for inference, or a forward and a backward for training. Each
ATen graph is lowered (constants folded), partitioned by capability, and its
supported regions compiled by sinkgraph in the config's mode (graph.py).
"""

import copy
import itertools
import operator
import threading
import weakref

import torch
from torch._functorch.aot_autograd import aot_module_simplified

from . import _C
from ._log import info
from .config import CompilerConfig
from .graph import INPUT, PARAM, Region
from .fusion import fuse_attention
from .lowering import decompositions, fold_constants
from .partition import partition

_BACKENDS = weakref.WeakSet()  # every Backend of the process, for counters(None)
_LOCK = threading.Lock()
_GRAPH_IDS = itertools.count()
_BACKEND_IDS = itertools.count()


def _dynamo_kinds(gm, example_inputs):
    """param or input per placeholder of Dynamo's graph.

    With torch 2.x's inlined nn.Modules, a module's parameters and buffers are
    inputs of Dynamo's graph; their GraphArg sources name where they came from.
    """
    kinds = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, example in zip(placeholders, example_inputs):
        arg = node.meta.get("grapharg")
        source = arg.source.name if arg is not None and hasattr(arg, "source") else ""
        source = source() if callable(source) else str(source)
        is_param = isinstance(example, torch.nn.Parameter) or "_parameters" in source or \
            "_buffers" in source
        kinds.append(PARAM if is_param else INPUT)
    return kinds


def _check_inputs(example_inputs, where):
    for i, t in enumerate(example_inputs):
        if isinstance(t, torch.Tensor):
            if t.device.type != "cpu":
                raise _C.Error(f"{where}: input {i} is on {t.device}; sinkgraph runs on the "
                               "CPU (move the model and inputs with .cpu())")


def _compile_reason():
    """Why Dynamo hands us a graph, from its compile id (frame, compile of that frame)."""
    cid = torch._guards.CompileContext.current_compile_id()
    if cid is None or cid.frame_id is None:
        return "called directly (not through Dynamo)"
    if not cid.frame_compile_id:
        return f"first compile of Dynamo frame {cid.frame_id}"
    return (f"Dynamo recompiled frame {cid.frame_id} (compile {cid.frame_compile_id}): a guard of "
            "its earlier graphs failed (a new shape, dtype, grad mode or module state), or a "
            "graph break resumed in it")


class CompiledAtenGraph:
    """One ATen graph AOTAutograd handed over: its regions and its fallback nodes."""

    def __init__(self, gm, kinds, config, name, kind, why=""):
        self.name = name
        self.kind = kind  # "inference", "forward" or "backward"
        self.why = why  # Dynamo's reason for handing this graph over
        self.folded = fold_constants(gm)
        # Note [Written-out attention] (fusion.py): max-autotune only.
        self.attention_fused = fuse_attention(gm) if config.mode == "max-autotune" else 0
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        gm, self.fallback = partition(gm)
        self.regions = []
        placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes
                                                   if n.op == "placeholder")}
        for node in list(gm.graph.nodes):
            if node.op != "call_module" or not node.target.startswith("fused_"):
                continue
            sub = getattr(gm, node.target)
            sub_kinds = [kinds[placeholders[a]] if a in placeholders and
                         placeholders[a] < len(kinds) else INPUT for a in node.args]
            region = Region(sub, sub_kinds, config, f"{name}.{len(self.regions)}")
            self.regions.append(region)
            submodule = node.target
            node.op, node.target = "call_function", region
            delattr(gm, submodule)
        gm.graph.lint()
        gm.recompile()
        if calls and not self.regions:
            ops = sorted({f[2] for f in self.fallback})
            raise _C.Error(f"graph @{name}: no node has a sinkgraph converter ({', '.join(ops)}); "
                           "sinkgraph would run nothing of it. Compile it with another backend, "
                           "or add converters (docs/python.md, \"Adding a converter\")")
        info(f"graph @{name} ({kind}) compiled: {why}; {len(calls)} ATen nodes, "
             f"{self.folded} folded, {self.attention_fused} written-out attentions fused, "
             f"{len(self.regions)} sinkgraph regions, "
             f"{len(self.fallback)} fallback nodes")
        # One region that is the whole graph: call it directly, without the FX
        # module, its arguments picked by a plan when they are not the graph's
        # inputs in order (Note [Arguments by plan], python/src/module.cpp).
        plan = self._whole_graph_plan(gm)
        self.whole = plan is not None
        inputs = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
        in_order = len(plan or ()) == inputs and all(
            isinstance(p, int) and p == i for i, p in enumerate(plan or ()))
        if self.whole and not in_order:
            self.regions[0].use_plan(plan)
        self.fn = self.regions[0] if self.whole else gm

    @staticmethod
    def _whole_graph_plan(gm):
        """When the graph is one region fed by its inputs and folded constants and
        returning the region's outputs: per region argument, the index of the
        graph input it is, or the constant tensor. None otherwise."""
        nodes = list(gm.graph.nodes)
        phs = {n: i for i, n in enumerate(n for n in nodes if n.op == "placeholder")}
        calls = [n for n in nodes if n.op == "call_function"]
        regions = [n for n in calls if isinstance(n.target, Region)]
        if len(regions) != 1 or regions[0].kwargs:
            return None
        if any(n.op not in ("placeholder", "get_attr", "call_function", "output") for n in nodes):
            return None
        region = regions[0]
        plan = []
        for a in region.args:
            if a in phs:
                plan.append(phs[a])
            elif (isinstance(a, torch.fx.Node) and a.op == "get_attr" and
                  isinstance(getattr(gm, a.target, None), torch.Tensor)):
                plan.append(getattr(gm, a.target))
            else:
                return None
        if not CompiledAtenGraph._returns_region(nodes, calls, region):
            return None
        return plan

    @staticmethod
    def _returns_region(nodes, calls, region):
        """The graph returns the region's outputs, in order, and nothing else."""
        items = [n for n in calls if n is not region]
        out = nodes[-1].args[0]
        if not items:
            return out is region or (isinstance(out, (tuple, list)) and len(out) == 1 and
                                     out[0] is region)
        if not isinstance(out, (tuple, list)) or len(out) != len(items):
            return False
        return all(o is it and it.target is operator.getitem and it.args == (region, i)
                   for i, (o, it) in enumerate(zip(out, items)))

    # AOTAutograd's boxed convention: called with one list, which the callee
    # owns (and clears, so the inputs can be freed early).
    _boxed_call = True

    def __call__(self, args):
        if self.whole:
            out = self.fn.call_list(args)
        else:
            result = self.fn(*args)
            out = list(result) if isinstance(result, (tuple, list)) else [result]
        args.clear()
        return out

    def counters(self):
        total = {}
        for r in self.regions:
            for k, v in r.counters().items():
                total[k] = total.get(k, 0) + v
        return total

    def explain(self):
        lines = [f"== graph @{self.name} ({self.kind}), compiled because: {self.why}",
                 f"  {len(self.regions)} sinkgraph regions, "
                 f"{self.folded} constant nodes folded at compile time, "
                 f"{len(self.fallback)} fallback nodes (run by torch)"]
        if self.attention_fused:
            lines.append(f"  {self.attention_fused} written-out attention(s) fused into one "
                         "scaled_dot_product_attention (Note [Written-out attention])")
        for text, reason, _ in self.fallback:
            lines.append(f"  fallback: {text}  [{reason}]")
        for r in self.regions:
            lines.append(r.explain())
        return "\n".join(lines)


def _guard_module_hooks():
    """Note [Hooks added after compilation]

    Dynamo by default does not guard on nn.Module hooks
    (torch._dynamo.config.skip_nnmodule_hook_guards is True): a forward hook
    registered, or removed, after a module was compiled is silently ignored,
    with any backend, Inductor's included (python/tests/test_modules_change.py
    shows it with backend="eager"). A wrong value without an error is what
    sinkgraph must never give, so creating a sinkgraph backend turns those
    guards on for the process: a hook change then recompiles the frame. It
    costs Dynamo's guard check about 0.25 µs per module per call (4-5 µs for
    a 17-module model, docs/performance.md "Guards on module hooks"). A user
    who never changes hooks after compiling can set the flag back to True
    after creating the backend.
    Guards are built when a frame compiles, after the backend was created on
    either path (get_backend() before torch.compile; backend="sinkgraph" at
    the first compile, before Dynamo builds that frame's guards).
    """
    if not getattr(_guard_module_hooks, "done", False):
        torch._dynamo.config.skip_nnmodule_hook_guards = False
        _guard_module_hooks.done = True


class Backend:
    """What get_backend returns: callable as backend(gm, example_inputs)."""

    def __init__(self, config, custom_decompositions=None):
        _guard_module_hooks()
        self.compiler_config = config
        self.custom_decompositions = dict(custom_decompositions or {})
        self.compiled = []  # every CompiledAtenGraph this backend made
        self._decompositions = None
        self._order = next(_BACKEND_IDS)
        with _LOCK:
            _BACKENDS.add(self)

    def __call__(self, gm, example_inputs, **kwargs):
        if kwargs:
            raise TypeError(f"a sinkgraph backend from get_backend() takes no {sorted(kwargs)}; "
                            "set them on its CompilerConfig (torch.compile's mode and options "
                            "apply to backend=\"sinkgraph\")")
        graph_id = next(_GRAPH_IDS)
        _check_inputs(example_inputs, f"graph {graph_id}")
        why = _compile_reason()
        kinds = _dynamo_kinds(gm, example_inputs)
        config = self.compiler_config
        if self._decompositions is None:
            self._decompositions = decompositions(self.custom_decompositions)

        def compiler(kind):
            def compile_graph(aten_gm, aten_inputs):
                if kind != "inference" and config.mode == "max-autotune":
                    raise _C.Error("max-autotune compiles inference graphs only: training "
                                   "(a backward graph) is not supported; use mode "
                                   "\"reduce-overhead\" or call the model under torch.no_grad()")
                name = f"g{graph_id}" + ("" if kind == "inference" else f".{kind[:3]}")
                k = kinds if kind != "backward" else []
                compiled = CompiledAtenGraph(aten_gm, k, config, name, kind, why)
                with _LOCK:
                    self.compiled.append(compiled)
                return compiled

            return compile_graph

        # AOTAutograd wants tuple outputs (Dynamo's graphs have them); a
        # GraphModule returning one value (symbolic_trace's) is wrapped and
        # its result unwrapped.
        output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        single = not isinstance(output.args[0], (tuple, list))
        if single:
            gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
            output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
            output.args = ((output.args[0],),)
            gm.recompile()
        compiled = aot_module_simplified(
            gm, example_inputs, fw_compiler=compiler("forward"),
            bw_compiler=compiler("backward"), inference_compiler=compiler("inference"),
            decompositions=self._decompositions, keep_inference_input_mutations=True)
        if not single:
            return compiled
        return lambda *args: compiled(*args)[0]

    def counters(self):
        total = {"graphs_compiled": 0, "fallback_nodes": 0}
        with _LOCK:
            compiled = list(self.compiled)
        for c in compiled:
            total["graphs_compiled"] += 1
            total["fallback_nodes"] += len(c.fallback)
            for k, v in c.counters().items():
                total[k] = total.get(k, 0) + v
        return total

    def reset_counters(self):
        with _LOCK:
            self.compiled.clear()


def get_backend(compiler_config=None, custom_decompositions=None):
    """sinkgraph's torch.compile backend for `compiler_config` (default: CompilerConfig())."""
    if compiler_config is None:
        compiler_config = CompilerConfig()
    if not isinstance(compiler_config, CompilerConfig):
        raise TypeError("get_backend: compiler_config must be a sinkgraph.CompilerConfig, not "
                        f"{type(compiler_config).__name__}")
    return Backend(compiler_config.copy(), custom_decompositions)


_NAMED = {}  # (mode, options) -> Backend, for backend="sinkgraph"

# torch.compile's modes and sinkgraph's.
_MODES = {None: None, "default": None,
          "reduce-overhead": "reduce-overhead", "max-autotune": "max-autotune",
          "max-autotune-no-cudagraphs": "max-autotune", "eager": "eager"}


def sinkgraph_backend(gm, example_inputs, mode=None, options=None):
    """The backend torch.compile finds by name: ``backend="sinkgraph"``.

    Registered under the ``torch_dynamo_backends`` entry point group, so a
    process that never imported sinkgraph finds it. torch.compile hands a named
    backend its ``mode`` and ``options``: the mode picks sinkgraph's mode
    (CompilerConfig's default, "max-autotune" as TorchAir's, when none is
    given), and every option sets the CompilerConfig attribute of that name
    (an unknown name is an error naming it).
    """
    if mode not in _MODES:
        raise _C.Error(f"torch.compile(backend=\"sinkgraph\"): unknown mode {mode!r}; "
                       f"expected one of {', '.join(repr(m) for m in _MODES if m)}")
    options = dict(options or {})
    key = (mode, tuple(sorted((k, repr(v)) for k, v in options.items())))
    with _LOCK:
        backend = _NAMED.get(key)
    if backend is None:
        config = CompilerConfig()
        if _MODES[mode] is not None:  # none given: CompilerConfig's default (TorchAir's)
            config.mode = _MODES[mode]
        for name, value in options.items():
            try:
                setattr(config, name, value)
            except (AttributeError, ValueError) as e:
                raise _C.Error(f"torch.compile(backend=\"sinkgraph\", options=...): {e}") from None
        backend = Backend(config)
        with _LOCK:
            backend = _NAMED.setdefault(key, backend)
    return backend(gm, example_inputs)


def all_backends():
    """Every live Backend, oldest first."""
    with _LOCK:
        return sorted(_BACKENDS, key=lambda b: b._order)
