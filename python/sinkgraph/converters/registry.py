"""ATen -> sinkgraph IR converters: one converter per ATen operator, in one registry.

This is the role TorchAir's converters play for GE. The backend walks the
ATen graph AOTAutograd produced; for each call it looks up the converter of
the node's ``OpOverload`` and calls it with the node's arguments, tensors
already converted to ``sinkgraph._C.Tensor``. A converter builds its result
from sinkgraph operators (``sg_op``), which the C++ tracer records as IR
nodes. A converter that cannot handle a particular call (an argument value
we do not implement) raises ``Unsupported``; the backend then treats the
node like one without a converter.

How to add an operator: docs/architecture.md, "The PyTorch front end".
"""

import math

import torch

from .. import _C

aten = torch.ops.aten

_CONVERTERS = {}
_CAPABILITY = {}


class Unsupported(Exception):
    """This call of an ATen operator has no sinkgraph equivalent."""


def optional_overload(qualified):
    """aten's `packet.overload`, or None where this torch has no such operator."""
    packet, _, overload = qualified.partition(".")
    try:
        return getattr(getattr(aten, packet), overload)
    except (AttributeError, RuntimeError):
        return None


def register(*overloads, capability=None):
    """Registers the decorated function as the converter of each overload (None: skipped).

    ``capability(node)``, when given, is asked by the partitioner before the
    node is put in a sinkgraph region: it returns None when the converter
    handles this call, else the reason it does not (the node then stays with
    torch, counted in ``fallback_nodes``).
    """

    def wrap(fn):
        for o in overloads:
            if o is None:
                continue
            if o in _CONVERTERS:
                raise RuntimeError(f"converter for {o} registered twice")
            _CONVERTERS[o] = fn
            if capability is not None:
                _CAPABILITY[o] = capability
        return fn

    return wrap


def lookup(target):
    return _CONVERTERS.get(target)


def capability(target):
    """The converter's own check of a node (see register), or None."""
    return _CAPABILITY.get(target)


def registered():
    """The ATen overloads that have a converter (for docs and tests)."""
    return sorted(str(o) for o in _CONVERTERS)


def sg_op(name, tensors, *scalars):
    return _C.op(name, list(tensors), list(scalars))


def _is_tensor(x):
    return isinstance(x, _C.Tensor)


def _wrap_dim(d, ndim):
    return d + ndim if d < 0 else d


def node_value(a):
    """An FX argument as capability checks see it: a node's example value (a fake
    tensor, an int or a SymInt), anything else as it is."""
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else a


def known_equal(a, b):
    """a == b for ints or SymInts, True only when it holds for every shape Dynamo
    allows (no guard is added: capability checks run after Dynamo's tracing)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return statically_known_true(a == b)


# ---- helpers built from sinkgraph operators ------------------------------------


def full(shape, value, dtype="f32"):
    return sg_op("full", [], list(shape), float(value), dtype)


class Copies:
    """Which converted values are copies where torch has views.

    sinkgraph's `view` needs a contiguous input; where torch views a strided
    tensor the converter copies it first. A later in-place write through
    such a value would land in the copy, not in the tensor torch writes: the
    backend refuses it (GraphRunner._check_write) instead of computing a
    silently wrong result. `made` is set while a converter runs.
    """

    made = False


def view(x, shape):
    shape = [int(d) for d in shape]
    if x.is_contiguous():
        return sg_op("view", [x], shape)
    # Adding or dropping size-1 dims keeps any layout: views of their own.
    src = list(x.shape)
    if [d for d in src if d != 1] == [d for d in shape if d != 1]:
        t = x
        for i in reversed([i for i, d in enumerate(src) if d == 1]):
            t = sg_op("squeeze", [t], i)
        for i, d in enumerate(shape):
            if d == 1:
                t = sg_op("unsqueeze", [t], i)
        return t
    Copies.made = True
    return sg_op("view", [sg_op("contiguous", [x])], shape)


def transpose(x, d0, d1):
    d0, d1 = _wrap_dim(d0, x.ndim), _wrap_dim(d1, x.ndim)
    if d0 == d1:
        return x
    return sg_op("transpose", [x], d0, d1)


def contiguous(x):
    if x.is_contiguous():
        return x
    Copies.made = True
    return sg_op("contiguous", [x])


def unsqueeze(x, dim):
    return sg_op("unsqueeze", [x], _wrap_dim(dim, x.ndim + 1))


def _scalar_operand(x, like):
    """A Python number as a tensor operand of like's dtype (rank 0)."""
    return full([], x, like.dtype)


def binary(name, a, b):
    if not _is_tensor(a):
        a = _scalar_operand(a, b)
    if not _is_tensor(b):
        b = _scalar_operand(b, a)
    if a.dtype != b.dtype:
        raise Unsupported(f"{name} of {a.dtype} and {b.dtype} (type promotion)")
    return sg_op(name, [a, b])


def matmul2d(a, b):
    """a[M, K] @ b[K, N] (a transposed weight runs as linear_product below)."""
    return sg_op("matmul", [a, b])


# Note [A torch linear past a few rows]
# sinkgraph's `linear` keeps its row kernel up to 32 rows so that a row's
# result never depends on the rows around it: batched decoding needs it
# (Note [Rows of a linear] in linalg.cpp). torch promises no such thing, and
# past a few rows a matrix product through oneDNN is faster on one thread
# (Note [A linear's rows and a matmul's] in linalg.cpp), which `matmul` with a
# transposed weight takes. A torch linear of more rows than
# MATMUL_ROW_KERNEL_ROWS when traced becomes matmul(x, w^T); up to them
# (decode) it stays `linear`, which max-autotune generates code for. A graph
# traced with more rows and replayed with fewer still runs the row kernel:
# the kernel chooses by the rows it is given.
MATMUL_ROW_KERNEL_ROWS = 8


def linear_product(x, w):
    """x[..., K] @ w[N, K]^T (Note [A torch linear past a few rows])."""
    rows = math.prod(x.shape[:-1])
    if rows > MATMUL_ROW_KERNEL_ROWS and w.ndim == 2:
        return sg_op("matmul", [x, transpose(w, 0, 1)])
    return sg_op("linear", [x, w])


