"""Views, reshapes, slices, concatenation and copies."""

import math

import torch

from .registry import (Copies, Unsupported, aten, binary, contiguous, full, matmul2d,
                       optional_overload, register, sg_op, transpose, unsqueeze, view,
                       _is_tensor, _wrap_dim)


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


@register(aten.slice.Tensor)
def _slice(x, dim=0, start=None, end=None, step=1):
    dim = _wrap_dim(dim, x.ndim)
    size = x.shape[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
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


@register(aten.empty.memory_format, aten.zeros.default)
def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    if dtype not in (None, torch.float32):
        raise Unsupported(f"empty of dtype {dtype}")
    return full(size, 0.0)


@register(aten.copy_.default)
def _copy_(dst, src, non_blocking=False):
    return sg_op("copy_", [dst, src])


