"""Views, reshapes, slices, concatenation and copies."""

import math

import torch

from .registry import (Copies, Unsupported, aten, binary, contiguous, full, matmul2d,
                       known_equal, node_value, optional_overload, register, sg_op, transpose,
                       unsqueeze, view, _is_tensor, _wrap_dim)


# ---- views and copies --------------------------------------------------------------


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(x, shape):
    return view(x, shape)


@register(aten._reshape_alias.default)
def _reshape_alias(x, shape, stride):
    return view(x, shape)


@register(aten.expand.default)
def _expand(x, shape, implicit=False):
    return sg_op("expand", [x], list(shape))


@register(aten.permute.default)
def _permute(x, dims):
    return sg_op("permute", [x], [_wrap_dim(d, x.ndim) for d in dims])


@register(aten.transpose.int)
def _transpose(x, d0, d1):
    return transpose(x, d0, d1)


@register(aten.t.default)
def _t(x):
    return transpose(x, 0, 1) if x.ndim == 2 else x


@register(aten.unsqueeze.default)
def _unsqueeze(x, dim):
    return unsqueeze(x, dim)


@register(aten.squeeze.dim)
def _squeeze_dim(x, dim):
    dim = _wrap_dim(dim, x.ndim)
    if x.shape[dim] != 1:
        return x
    return sg_op("squeeze", [x], dim)


@register(aten.select.int)
def _select(x, dim, index):
    dim = _wrap_dim(dim, x.ndim)
    size = x.shape[dim]
    if index < 0:
        index += size
    return sg_op("squeeze", [sg_op("slice", [x], dim, index, index + 1, 1)], dim)


def _slice_bounds(size, start, end):
    """torch's slice bounds (None, negative, past the end) as 0 <= start <= end <= size."""
    start = 0 if start is None else int(start)
    end = size if end is None else int(end)
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    return start, min(max(end, start), size)


@register(aten.slice.Tensor)
def _slice(x, dim=0, start=None, end=None, step=1):
    dim = _wrap_dim(dim, x.ndim)
    size = x.shape[dim]
    start, end = _slice_bounds(size, start, end)
    if start == 0 and end == size and step == 1:
        return x
    return sg_op("slice", [x], dim, start, end, step)


@register(aten.split.Tensor)
def _split(x, split_size, dim=0):
    dim = _wrap_dim(dim, x.ndim)
    size = x.shape[dim]
    return [sg_op("slice", [x], dim, s, min(s + split_size, size), 1)
            for s in range(0, size, split_size)]


@register(aten.split_with_sizes.default)
def _split_with_sizes(x, sizes, dim=0):
    dim = _wrap_dim(dim, x.ndim)
    out, start = [], 0
    for s in sizes:
        out.append(sg_op("slice", [x], dim, start, start + s, 1))
        start += s
    return out


@register(aten.cat.default)
def _cat(tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if len(tensors) == 1:
        return tensors[0]
    return sg_op("cat", tensors, _wrap_dim(dim, tensors[0].ndim))


@register(aten.stack.default)
def _stack(tensors, dim=0):
    dim = _wrap_dim(dim, tensors[0].ndim + 1)
    return _cat([unsqueeze(t, dim) for t in tensors], dim)


@register(aten.clone.default)
def _clone(x, memory_format=None):
    # `contiguous` always writes a new buffer (remove_noop_ops drops it when
    # nothing writes either copy).
    return sg_op("contiguous", [x])


@register(aten.detach.default, aten.alias.default, aten.lift_fresh_copy.default)
def _identity(x):
    return x


def _float32_fill(node):
    dtype = node.kwargs.get("dtype")
    if dtype not in (None, torch.float32):
        return f"a {dtype} tensor (sinkgraph fills float32 here)"
    return None


@register(aten.empty.memory_format, aten.zeros.default, capability=_float32_fill)
def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    if dtype not in (None, torch.float32):
        raise Unsupported(f"empty of dtype {dtype}")
    return full(size, 0.0)


def _full_like_capability(node):
    x = node_value(node.args[0])
    extra = {k: v for k, v in node.kwargs.items()
             if not (k == "pin_memory" and not v) and v is not None
             and not (k == "dtype" and v == getattr(x, "dtype", None))
             and not (k == "layout" and v == torch.strided)
             and not (k == "device" and torch.device(v).type == "cpu")
             and not (k == "memory_format" and v == torch.preserve_format)}
    if extra:
        return f"full_like with {sorted(extra)} (sinkgraph fills the input's dtype and shape)"
    if not isinstance(node.args[1], (int, float)) or isinstance(node.args[1], bool):
        return "full_like with a value that is not a number"
    if not x.dtype.is_floating_point and (not isinstance(node.args[1], int)
                                          or abs(node.args[1]) >= 2**53):
        return f"full_like of a {x.dtype} tensor with {node.args[1]} (filled through a double)"
    return None


@register(aten.full_like.default, capability=_full_like_capability)
def _full_like(x, value, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    # A new contiguous tensor of x's shape and dtype (a mask's -inf included).
    return full(list(x.shape), value, x.dtype)


@register(aten.copy_.default, capability=lambda node: _same_dtype_capability(node))
def _copy_(dst, src, non_blocking=False):
    return sg_op("copy_", [dst, src])




# ---- as_strided ---------------------------------------------------------------------
#
# as_strided reads the input's storage, not its elements in order; sinkgraph's
# tensors have their own layouts. It converts when it only re-reads a
# contiguous input (no storage offset) as a permutation of a contiguous layout
# of the same elements, plus size-1 dims: then it is a view and a permute of
# the elements in order (convnext_tiny's classifier input, [1, C, 1, 1] with
# strides [C, 1, C, C], is one).


def _strided_order(size, stride, known=lambda a, b: a == b):
    """The dims of size != 1, outermost first, when (size, stride) is a permuted
    contiguous layout; else None. Returns (order, numel)."""
    dims = [i for i in range(len(size)) if not known(size[i], 1)]
    try:
        order = sorted(dims, key=lambda i: -int(stride[i]))
    except (TypeError, ValueError, RuntimeError):  # symbolic strides: only the given order
        order = dims
    expected = 1
    for i in reversed(order):
        if not known(stride[i], expected):
            return None
        expected = expected * size[i]
    return order, expected


def _as_strided_capability(node):
    x = node_value(node.args[0])
    size = [node_value(a) for a in node.args[1]]
    stride = [node_value(a) for a in node.args[2]]
    offset = node_value(node.args[3]) if len(node.args) > 3 else node.kwargs.get("storage_offset")
    if x is None or any(s is None for s in size + stride):
        return "as_strided without shape metadata"
    if offset is not None and not known_equal(offset, x.storage_offset()):
        return "as_strided at another storage offset than its input's"
    if any(known_equal(s, 0) for s in size):
        return "as_strided to an empty tensor"
    expected = 1
    for s, st in reversed(list(zip(x.shape, x.stride()))):
        if not known_equal(s, 1) and not known_equal(st, expected):
            return "as_strided of a non-contiguous input (it reads storage, not elements)"
        expected = expected * s
    found = _strided_order(size, stride, known_equal)
    if found is None:
        return f"as_strided to strides {stride} (not a permuted contiguous layout)"
    if not known_equal(found[1], x.numel()):
        return "as_strided to fewer or more elements than its input has"
    return None


@register(aten.as_strided.default, capability=_as_strided_capability)
def _as_strided(x, size, stride, storage_offset=None):
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    found = _strided_order(size, stride)
    numel = 1
    for s in x.shape:
        numel *= s
    if found is None or found[1] != numel:
        raise Unsupported(f"as_strided to size {size}, strides {stride} of x{list(x.shape)}")
    order = found[0]
    t = view(contiguous(x), [size[i] for i in order])
    dims = sorted(order)
    perm = [order.index(i) for i in dims]
    if perm != list(range(len(perm))):
        t = sg_op("permute", [t], perm)
    for i, s in enumerate(size):
        if s == 1:
            t = sg_op("unsqueeze", [t], i)
    return t


# ---- functional writes: select_scatter, slice_scatter, copy ------------------------------
#
# AOTAutograd rewrites a write into a slice of a buffer (`cache[l, pos] = k`)
# as a functional copy and a select_scatter. select_scatter's core
# decomposition is a where over an arange == index mask, which sinkgraph has
# not; kept whole, it is a cat of the untouched slices around the new one.


def _same_dtype_capability(node):
    a, b = node_value(node.args[0]), node_value(node.args[1])
    if a is None or b is None:
        return "no dtype metadata"
    if a.dtype != b.dtype:
        return f"{a.dtype} and {b.dtype} (sinkgraph does not convert dtypes)"
    return None


def _replace_along(base, src, dim, start, end):
    """base with its elements [start, end) along dim replaced by src (a new tensor)."""
    size = base.shape[dim]
    parts = []
    if start > 0:
        parts.append(sg_op("slice", [base], dim, 0, start, 1))
    parts.append(src)
    if end < size:
        parts.append(sg_op("slice", [base], dim, end, size, 1))
    if len(parts) == 1:
        return sg_op("contiguous", [src])
    return sg_op("cat", parts, dim)


@register(aten.select_scatter.default, capability=_same_dtype_capability)
def _select_scatter(base, src, dim, index):
    dim = _wrap_dim(dim, base.ndim)
    size = base.shape[dim]
    index = int(index)
    if index < 0:
        index += size
    if not 0 <= index < size:
        raise Unsupported(f"select_scatter at {index} of a dimension of size {size}")
    return _replace_along(base, unsqueeze(src, dim), dim, index, index + 1)


def _slice_scatter_capability(node):
    step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
    if step != 1:
        return f"slice_scatter with step {step} (sinkgraph writes contiguous slices)"
    return _same_dtype_capability(node)


@register(aten.slice_scatter.default, capability=_slice_scatter_capability)
def _slice_scatter(base, src, dim=0, start=None, end=None, step=1):
    if step != 1:
        raise Unsupported(f"slice_scatter with step {step}")
    dim = _wrap_dim(dim, base.ndim)
    size = base.shape[dim]
    start, end = _slice_bounds(size, start, end)
    if src.shape[dim] != end - start:
        raise Unsupported(f"slice_scatter of {src.shape[dim]} elements into [{start}, {end})")
    return _replace_along(base, src, dim, start, end)


@register(aten.copy.default, capability=_same_dtype_capability)
def _copy(dst, src, non_blocking=False):
    # Functional copy: src's values broadcast to dst's shape, in a new tensor.
    if list(src.shape) != list(dst.shape):
        src = sg_op("expand", [src], list(dst.shape))
    return sg_op("contiguous", [src])
