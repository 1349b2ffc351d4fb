"""Convolutional networks: convolution, batch norm, pooling."""

import math
import operator

import torch

from .registry import (Copies, Unsupported, aten, binary, contiguous, full, matmul2d,
                       node_value, optional_overload, register, sg_op, transpose, unsqueeze, view,
                       _is_tensor, _wrap_dim)


# ---- convolutional networks -------------------------------------------------------------


def _convolution_capability(node):
    x = node_value(node.args[0])
    if node.args[6]:
        return "transposed convolution"
    if x is None or x.ndim not in (3, 4):
        return (f"convolution of a {getattr(x, 'ndim', '?')}-D input (sinkgraph's conv2d "
                "takes images, and sequences as images of height 1)")
    if x.dtype != torch.float32:
        return f"convolution in {x.dtype} (sinkgraph's conv2d is float32)"
    return None


@register(aten.convolution.default, capability=_convolution_capability)
def _convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise Unsupported("transposed convolution")
    if x.ndim not in (3, 4):
        raise Unsupported(f"convolution of a {x.ndim}-D input (only sequences and images)")
    if b is None:
        b = full([w.shape[0]], 0.0, x.dtype)
    if x.ndim == 3:
        # A 1-D convolution (Conv1d: [N, C, L]) is a 2-D one over an image of
        # height 1, its kernel of height 1: the same sums in the same order.
        y = sg_op("conv2d", [unsqueeze(x, 2), unsqueeze(w, 2), b], 1, stride[0], 0, padding[0],
                  1, dilation[0], groups, -1)
        return view(y, [y.shape[0], y.shape[1], y.shape[3]])
    return sg_op("conv2d", [x, w, b], stride[0], stride[1], padding[0], padding[1],
                 dilation[0], dilation[1], groups, -1)


def _batch_norm_capability(training_index):
    def check(node):
        if training_index is not None and node.args[training_index]:
            return "batch_norm in training mode (batch statistics; sinkgraph is for inference)"
        if node.args[3] is None or node.args[4] is None:
            return "batch_norm without running statistics"
        return None

    return check


@register(aten.native_batch_norm.default, capability=_batch_norm_capability(5))
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


@register(optional_overload("_native_batch_norm_legit_no_training.default"),
          capability=_batch_norm_capability(None))
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


def _adaptive_windows(size, out):
    """The window of an adaptive pool from `size` to `out` when every window has it."""
    return size // out if out > 0 and size % out == 0 else None


def _adaptive_avg_pool2d_capability(node):
    x = node_value(node.args[0])
    out = [node_value(o) for o in node.args[1]]
    if x is None or x.ndim not in (3, 4):
        return "adaptive_avg_pool2d without a 3-D or 4-D input"
    try:
        h, w, oh, ow = (int(v) for v in (x.shape[-2], x.shape[-1], out[0], out[1]))
    except (TypeError, ValueError, RuntimeError):
        return "adaptive_avg_pool2d of symbolic spatial sizes"
    if _adaptive_windows(h, oh) is None or _adaptive_windows(w, ow) is None:
        return (f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow} (windows of different sizes; "
                "sinkgraph takes output sizes that divide the input)")
    return None


@register(aten._adaptive_avg_pool2d.default, capability=_adaptive_avg_pool2d_capability)
def _adaptive_avg_pool2d(x, output_size):
    # Equal windows: [.., H, W] viewed as [.., OH, KH, OW, KW], averaged over KH and KW.
    h, w = x.shape[-2], x.shape[-1]
    oh, ow = (int(o) for o in output_size)
    kh, kw = _adaptive_windows(h, oh), _adaptive_windows(w, ow)
    if kh is None or kw is None:
        raise Unsupported(f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow}")
    if kh == 1 and kw == 1:
        return x
    n = x.ndim
    if oh == 1 and ow == 1:
        return sg_op("mean", [x], [n - 2, n - 1], True)
    lead = list(x.shape[:-2])
    y = view(x, lead + [oh, kh, ow, kw])
    return sg_op("mean", [y], [n - 1, n + 1], False)
