"""Matrix products: mm, bmm, mv, addmm, linear."""

import math

import torch

from .registry import (Copies, Unsupported, aten, binary, contiguous, full, linear_product,
                       matmul2d, optional_overload, register, sg_op, transpose, unsqueeze, view,
                       _is_tensor, _wrap_dim)


# ---- linear algebra -------------------------------------------------------------------


@register(aten.mm.default)
def _mm(a, b):
    return matmul2d(a, b)


@register(aten.bmm.default)
def _bmm(a, b):
    return sg_op("matmul", [a, b])


@register(aten.mv.default)
def _mv(a, v):
    return view(sg_op("matmul", [a, view(v, [v.shape[0], 1])]), [a.shape[0]])


@register(aten.addmm.default)
def _addmm(bias, a, b, beta=1, alpha=1):
    out = matmul2d(a, b)
    if alpha != 1:
        out = sg_op("mul_scalar", [out], float(alpha))
    if beta == 0:
        return out
    if beta != 1:
        bias = sg_op("mul_scalar", [bias], float(beta))
    return sg_op("add", [out, bias])


@register(aten.linear.default)
def _linear(x, w, b=None):
    out = linear_product(x, w)
    return out if b is None else sg_op("add", [out, b])


