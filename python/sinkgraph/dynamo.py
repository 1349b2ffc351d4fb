"""sinkgraph.compile(model, backend=...): Dynamo's part, for torch 1.13 (which has no torch.compile).

On the first call, and whenever a guard fails, the module's forward is traced
to an FX graph for the concrete inputs with make_fx in fake mode over
``functional_call``: parameters and buffers become graph inputs, Python
control flow is evaluated as it runs (a branch on a tensor's values cannot
be traced, and says so). Each graph goes to the backend, as torch.compile
hands Dynamo's graphs to a backend.

Guards (Note [Front-end guards]): the inputs' shapes, dtypes and strides and
the values of non-tensor arguments; torch.is_grad_enabled(); every
submodule's plain attributes, `training` included (so model.train() and a
Python attribute read in forward re-trace); the identity of every parameter
and buffer. A replaced parameter with the same shape keeps the graph: the
new tensor is passed in its place, and the captured graph re-captures for
the new address (recapture_due_to_parameter_change), or, under
frozen_parameter, the call raises: the graph folded the old values.
"""

import operator
import threading
import warnings

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import _C
from .backend import PARAM_NAMES_ATTR, Backend

try:
    from torch.func import functional_call as _functional_call  # torch >= 2.0
except ImportError:
    from torch.nn.utils.stateless import functional_call as _functional_call

_TORCH2 = int(torch.__version__.split(".")[0]) >= 2
_PLAIN = (bool, int, float, str, type(None))
_MISSING = object()
_TRACE_LOCK = threading.Lock()


def _plain_value(v):
    if isinstance(v, _PLAIN):
        return True
    if isinstance(v, tuple):
        return all(_plain_value(x) for x in v)
    return False


def _attribute_guards(model):
    """Per module: (its __dict__, a getter of the guarded names, their values, names).

    Checked on every call, so built for speed: one C-level itemgetter and one
    tuple comparison per module."""
    out = []
    for mod in model.modules():
        names = tuple(n for n, v in vars(mod).items() if _plain_value(v))
        if not names:
            continue
        getter = operator.itemgetter(*names) if len(names) > 1 else \
            (lambda d, n=names[0]: (d[n],))
        d = vars(mod)
        out.append((mod, d, getter, getter(d), names))
    return out


def _arg_key(a):
    if isinstance(a, torch.Tensor):
        return ("tensor", tuple(a.shape), a.dtype, a.stride(), a.device.type)
    if _plain_value(a):
        return ("value", type(a), a)
    raise _C.Error(f"sinkgraph.compile: an argument of type {type(a).__name__} is not "
                   "supported; pass tensors and plain Python values")


def _describe_key_change(old, new):
    for i, (a, b) in enumerate(zip(old, new)):
        if a != b:
            if a[0] == "tensor" and b[0] == "tensor":
                for what, x, y in (("shape", a[1], b[1]), ("dtype", a[2], b[2]),
                                   ("strides", a[3], b[3])):
                    if x != y:
                        return f"argument {i}: {what} {x} -> {y}"
            return f"argument {i}: {a[1:]} -> {b[1:]}"
    return f"{len(old)} -> {len(new)} arguments"


class _Entry:
    def __init__(self, key, grad, attrs, param_objects, param_names, compiled, spec, positions,
                 forwards, reason):
        self.key = key
        self.grad = grad
        self.attrs = attrs
        self.param_objects = param_objects
        self.param_names = param_names
        self.compiled = compiled
        self.spec = spec
        self.positions = positions  # where each tensor argument goes
        self.forwards = forwards
        self.reason = reason
        self.calls = 0
        self.direct = None  # the compiled forward, called without AOTAutograd's wrapper

    def attrs_hold(self):
        for mod, d, getter, values, names in self.attrs:
            try:
                now = getter(d)
            except KeyError:
                now = None
            if now != values or now is None:
                for i, name in enumerate(names):
                    v = d.get(name, _MISSING)
                    if v is _MISSING or v != values[i]:
                        return f"attribute {type(mod).__name__}.{name} changed: " \
                               f"{values[i]!r} -> {'deleted' if v is _MISSING else repr(v)}"
                return f"attributes of {type(mod).__name__} changed"
        return None


class CompiledModule:
    """What sinkgraph.compile returns: call it as the module."""

    def __init__(self, model, backend):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"sinkgraph.compile: expected a torch.nn.Module, got "
                            f"{type(model).__name__}")
        if not isinstance(backend, Backend):
            raise TypeError("sinkgraph.compile: backend must come from sinkgraph.get_backend()")
        self._model = model
        self._backend = backend
        self._entries = []
        self._log = []
        self._traces = 0
        self._eager_calls = 0
        self._warned = False
        self._lock = threading.RLock()

    @property
    def model(self):
        return self._model

    def _param_slots(self):
        """(module, '_parameters' or '_buffers', name, full name) of every parameter and
        buffer, tied ones under each of their names (functional_call swaps every name)."""
        slots = []
        for kind in ("_parameters", "_buffers"):
            for prefix, mod in self._model.named_modules(remove_duplicate=False):
                for name, t in getattr(mod, kind).items():
                    if t is not None:
                        slots.append((mod, kind, name, f"{prefix}.{name}" if prefix else name))
        return slots

    @staticmethod
    def _read(slots):
        try:
            return [getattr(mod, kind)[name] for mod, kind, name, _ in slots]
        except KeyError:
            return None

    def __call__(self, *args, **kwargs):
        # Calls of one module from several threads take turns (the C++
        # compiled function serializes its calls anyway); tracing, which is
        # not thread-safe in torch (fake-tensor mode, AOTAutograd's config),
        # also takes _TRACE_LOCK, shared by every module.
        with self._lock:
            return self._call(args, kwargs)

    def _call(self, args, kwargs):
        if kwargs:
            raise _C.Error("sinkgraph.compile: keyword arguments are not supported; pass "
                           f"{', '.join(kwargs)} positionally")
        grad = torch.is_grad_enabled()
        if not self._entries:
            self._slots = self._param_slots()
        params = self._read(self._slots)
        if params is None:  # a parameter or buffer was deleted
            self._slots = self._param_slots()
            params = self._read(self._slots)
        names = [full for _, _, _, full in self._slots]
        if grad and any(p.requires_grad for p in params):
            raise _C.Error("sinkgraph.compile is for inference: parameters require gradients "
                           "and grad mode is on. Call the model under torch.no_grad() (or "
                           "torch.inference_mode())")
        key = tuple(_arg_key(a) for a in args)
        why = None
        for entry in self._entries:
            if entry.key != key or entry.grad != grad:
                continue
            why = entry.attrs_hold()
            if why is not None:
                continue
            if len(params) != len(entry.param_objects) or names != entry.param_names:
                why = "the module's parameters changed"
                continue
            for name, old, new in zip(names, entry.param_objects, params):
                if old is not new:
                    if (old.shape, old.dtype, old.stride()) != (new.shape, new.dtype,
                                                                new.stride()):
                        why = f"parameter {name!r} replaced by one of another shape or dtype"
                        break
                    if self._backend.compiler_config.frozen_parameter:
                        raise _C.Error(
                            f"sinkgraph: parameter {name!r} was replaced after the graph was "
                            "compiled with frozen_parameter=True, which folds parameter values "
                            "into the graph; compile again, or leave frozen_parameter off")
            else:
                entry.param_objects = params
                entry.calls += 1
                return self._run(entry, args, params)
        if not self._entries:
            reason = "first call"
        elif why is None:
            last = self._entries[-1]
            if last.grad != grad:
                why = f"grad mode {last.grad} -> {grad}"
            else:
                why = _describe_key_change(last.key, key)
            reason = "guard failed: " + why
        else:
            reason = "guard failed: " + why
        limit = self._backend.compiler_config.recompile_limit
        if self._traces >= limit:
            self._eager_calls += 1
            if not self._warned:
                warnings.warn(f"sinkgraph.compile: {self._traces} traces reached recompile_limit "
                              f"({limit}); {reason}; running the module eagerly from now on for "
                              "new guard sets")
                self._warned = True
            return self._model(*args)
        entry = self._trace(args, key, grad, names, params, reason)
        entry.calls += 1
        return self._run(entry, args, params)

    def _trace(self, args, key, grad, names, params, reason):
        model = self._model
        tensor_positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        n = len(params)
        holder = {}

        def flat_fn(*flat):
            pb = dict(zip(names, flat[:n]))
            call_args = list(args)
            for pos, t in zip(tensor_positions, flat[n:]):
                call_args[pos] = t
            out = _functional_call(model, pb, tuple(call_args))
            flat_out, spec = tree_flatten(out)
            holder["spec"] = spec
            return list(flat_out)

        inputs = list(params) + [args[i] for i in tensor_positions]
        try:
            with _TRACE_LOCK:
                gm = make_fx(flat_fn, tracing_mode="fake")(*inputs)
        except RuntimeError as e:
            msg = str(e)
            if "data-dependent" in msg or "value out of a tracing tensor" in msg or \
                    "DataDependentOutputException" in type(e).__name__:
                raise _C.Error(
                    f"sinkgraph.compile: cannot trace {type(model).__name__}.forward: it reads "
                    "a tensor's values in Python (data-dependent control flow, .item(), "
                    "bool(tensor)); a graph cannot depend on values. Move the branch out of "
                    f"forward or express it with tensor operations. ({msg.splitlines()[0]})"
                ) from None
            raise
        setattr(gm, PARAM_NAMES_ATTR, names)
        compiled = self._backend(gm, inputs)
        entry = _Entry(key, grad, _attribute_guards(model), params, names, compiled,
                       holder["spec"], tensor_positions, None, reason)
        self._traces += 1
        self._entries.append(entry)
        self._log.append(f"trace {self._traces}: {reason}")
        return entry

    def _run(self, entry, args, params):
        flat = list(params) + [args[i] for i in entry.positions]
        if entry.direct is not None:
            return tree_unflatten(entry.direct(flat), entry.spec)
        if entry.forwards is not None:
            return tree_unflatten(list(entry.compiled(*flat)), entry.spec)
        with _TRACE_LOCK:
            # AOTAutograd traces and the backend compiles the ATen graph on
            # this first call: the forwards it makes are this entry's.
            first = len(self._backend.compiled)
            out = entry.compiled(*flat)
            entry.forwards = self._backend.compiled[first:]
        # torch 1.13's AOTAutograd runs an inference graph by calling the
        # compiled forward with the flat arguments and nothing else
        # (aot_dispatch_base): later calls go straight to it. torch 2.x adds
        # runtime wrappers (input mutations, aliased outputs): kept.
        if not _TORCH2 and len(entry.forwards) == 1:
            entry.direct = entry.forwards[0]
        return tree_unflatten(list(out), entry.spec)

    # ---- reports -------------------------------------------------------------------------

    def _forwards(self):
        out = []
        for e in self._entries:
            out.extend(e.forwards or [])
        return out

    def counters(self):
        total = {}
        for f in self._forwards():
            for k, v in f.counters().items():
                total[k] = total.get(k, 0) + v
        for k in ("captured", "replayed", "recapture_due_to_mutated_input_change",
                  "recapture_due_to_parameter_change", "recapture_due_to_force_recapture",
                  "eager_fallback_due_to_capture_limit", "fallback_nodes"):
            total.setdefault(k, 0)
        return total

    def explain(self):
        cfg = self._backend.compiler_config
        lines = [f"sinkgraph.compile({type(self._model).__name__}): mode {cfg.mode}, "
                 f"{self._traces} trace(s), {self._eager_calls} eager call(s) past "
                 f"recompile_limit {cfg.recompile_limit}"]
        for i, e in enumerate(self._entries):
            lines.append(f"trace {i + 1}: {e.reason}; {e.calls} call(s)")
            for f in e.forwards or []:
                lines.extend("  " + line for line in f.explain().splitlines())
        return "\n".join(lines)


def compile(model, backend=None):  # noqa: A001 - the name TorchAir users know
    """Compiles `model` (a torch.nn.Module) with `backend` (sinkgraph.get_backend())."""
    if backend is None:
        from .backend import get_backend
        backend = get_backend()
    return CompiledModule(model, backend)
