"""Convolutional networks: convolution, batch norm, pooling."""

import math
import operator

import torch

from .registry import (Copies, Unsupported, aten, binary, contiguous, full, matmul2d,
                       optional_overload, register, sg_op, transpose, unsqueeze, view,
                       _is_tensor, _wrap_dim)


# ---- convolutional networks -------------------------------------------------------------


@register(aten.convolution.default)
def _convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise Unsupported("transposed convolution")
    if x.ndim != 4:
        raise Unsupported(f"convolution of a {x.ndim}-D input (only 2-D images)")
    if b is None:
        b = full([w.shape[0]], 0.0, x.dtype)
    return sg_op("conv2d", [x, w, b], stride[0], stride[1], padding[0], padding[1],
                 dilation[0], dilation[1], groups, -1)


@register(aten.native_batch_norm.default)
def _native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if training:
        raise Unsupported("batch_norm in training mode (sinkgraph is for inference)")
    c = x.shape[1]
    if weight is None:
        weight = full([c], 1.0, x.dtype)
    if bias is None:
        bias = full([c], 0.0, x.dtype)
    y = sg_op("batch_norm", [x, running_mean, running_var, weight, bias], float(eps))
    return (y, None, None)


@register(optional_overload("_native_batch_norm_legit_no_training.default"))
def _batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    return _native_batch_norm(x, weight, bias, running_mean, running_var, False, momentum, eps)


def _max_pool2d_capability(node):
    for u in node.users:
        if u.target is not operator.getitem or u.args[1] != 0:
            if u.users or u.target is not operator.getitem:
                return "max_pool2d's indices are used (sinkgraph computes only the values)"
    return None


@register(aten.max_pool2d_with_indices.default, capability=_max_pool2d_capability)
def _max_pool2d_with_indices(x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    kernel = list(kernel) * (2 if len(kernel) == 1 else 1)
    stride = list(stride) if stride else kernel
    stride = stride * (2 if len(stride) == 1 else 1)
    padding = list(padding) * (2 if len(padding) == 1 else 1)
    dilation = list(dilation) * (2 if len(dilation) == 1 else 1)
    y = sg_op("max_pool2d", [x], kernel[0], kernel[1], stride[0], stride[1], padding[0],
              padding[1], dilation[0], dilation[1], bool(ceil_mode))
    return (y, None)


@register(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(x, output_size):
    h, w = x.shape[-2], x.shape[-1]
    if list(output_size) == [1, 1]:
        return sg_op("mean", [x], [x.ndim - 2, x.ndim - 1], True)
    if list(output_size) == [h, w]:
        return x
    raise Unsupported(f"adaptive_avg_pool2d to {list(output_size)} from {h}x{w}")


