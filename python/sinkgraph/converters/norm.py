"""Normalisation, softmax and reductions."""

import math

import torch

from .registry import (Copies, Unsupported, aten, binary, contiguous, full, known_equal,
                       matmul2d, node_value, optional_overload, register, sg_op, transpose,
                       unsqueeze, view, _is_tensor, _wrap_dim)


# ---- normalisation, softmax, reductions ------------------------------------------------


@register(aten._softmax.default)
def _softmax(x, dim, half_to_float=False):
    dim = _wrap_dim(dim, x.ndim)
    last = x.ndim - 1
    if dim == last:
        return sg_op("softmax", [x])
    return transpose(sg_op("softmax", [contiguous(transpose(x, dim, last))]), dim, last)


@register(aten.native_layer_norm.default)
def _native_layer_norm(x, normalized_shape, weight, bias, eps):
    n = len(normalized_shape)
    inner = 1
    for s in normalized_shape:
        inner *= s
    if weight is None:
        weight = full([inner], 1.0, x.dtype)
    if bias is None:
        bias = full([inner], 0.0, x.dtype)
    if n == 1:
        return (sg_op("layer_norm", [x, weight, bias], float(eps)), None, None)
    shape = list(x.shape)
    flat = view(x, shape[: len(shape) - n] + [inner])
    y = sg_op("layer_norm", [flat, view(weight, [inner]), view(bias, [inner])], float(eps))
    return (view(y, shape), None, None)


def _float32_result(node):
    dtype = node.kwargs.get("dtype")
    if dtype is not None and dtype != torch.float32:
        return f"a {dtype} result (sinkgraph does not convert dtypes)"
    return None


def _reduced_dims(name, x, dims, dtype):
    """A reduction's dims, wrapped (none or empty: all of them); f32 results only."""
    if dtype is not None and dtype != torch.float32:
        raise Unsupported(f"{name} with dtype {dtype}")
    if dims is None or len(dims) == 0:
        dims = range(x.ndim)
    return [_wrap_dim(d, x.ndim) for d in dims]


@register(aten.mean.dim, capability=_float32_result)
def _mean_dim(x, dims, keepdim=False, dtype=None):
    return sg_op("mean", [x], _reduced_dims("mean", x, dims, dtype), bool(keepdim))


@register(aten.mean.default, capability=_float32_result)
def _mean(x, dtype=None):
    return _mean_dim(x, list(range(x.ndim)), False, dtype)




def _argmax_capability(node):
    x = node_value(node.args[0])
    if not isinstance(x, torch.Tensor):
        return "argmax of a non-tensor"
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64):
        return f"argmax of {x.dtype}"
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if (x.ndim == 0 or dim is None) and known_equal(x.numel(), 0):
        return "argmax of an empty tensor"
    if dim is not None and x.ndim > 0 and known_equal(x.shape[_wrap_dim(dim, x.ndim)], 0):
        return "argmax over an empty dimension"
    return None


@register(aten.argmax.default, capability=_argmax_capability)
def _argmax(x, dim=None, keepdim=False):
    """torch.argmax: the first maximum's index, a NaN counting as the maximum
    (ops::argmax over the last dim; another dim is moved there by a strided
    view; without a dim, over the flattened tensor)."""
    if dim is None or x.ndim == 0:
        flat = sg_op("argmax", [view(contiguous(x), [-1])])  # a 0-d i64
        if keepdim and x.ndim > 0:
            return view(flat, [1] * x.ndim)
        return flat
    dim = _wrap_dim(dim, x.ndim)
    if dim != x.ndim - 1:  # the other dims in order, then dim: a strided view
        x = sg_op("permute", [x], [d for d in range(x.ndim) if d != dim] + [dim])
    out = sg_op("argmax", [x])
    return unsqueeze(out, dim) if keepdim else out


def _reduced_count(x, dims):
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


def _sum_capability(node):
    x = node_value(node.args[0])
    if x is not None and any(known_equal(s, 0) for s in x.shape):
        return "a sum over an empty tensor"
    return _float32_result(node)


@register(aten.sum.dim_IntList, capability=_sum_capability)
def _sum_dim(x, dims, keepdim=False, dtype=None):
    # sinkgraph has no sum: mean times the count (within an ulp or two of a sum).
    dims = _reduced_dims("sum", x, dims, dtype)
    n = _reduced_count(x, dims)
    if n == 0:
        raise Unsupported("sum over an empty dimension")
    out = sg_op("mean", [x], dims, bool(keepdim))
    return out if n == 1 else sg_op("mul_scalar", [out], float(n))


@register(aten.sum.default, capability=_sum_capability)
def _sum(x, dtype=None):
    return _sum_dim(x, list(range(x.ndim)), False, dtype)
