"""Elementwise operators: unary functions and arithmetic with broadcasting."""

import math

import torch

from .registry import (Copies, Unsupported, aten, binary, contiguous, full, matmul2d,
                       node_value, optional_overload, register, sg_op, transpose, unsqueeze, view,
                       _is_tensor, _wrap_dim)


# ---- elementwise -----------------------------------------------------------------

_UNARY = {
    aten.relu.default: "relu",
    aten.gelu.default: "gelu",
    aten.silu.default: "silu",
    aten.sigmoid.default: "sigmoid",
    aten.tanh.default: "tanh",
    aten.hardswish.default: "hardswish",
    aten.hardsigmoid.default: "hardsigmoid",
    aten.neg.default: "neg",
    aten.exp.default: "exp",
    aten.sqrt.default: "sqrt",
    aten.rsqrt.default: "rsqrt",
    aten.erf.default: "erf",
}


def _make_unary(name):
    def convert(x, *rest, **kwargs):
        if name == "gelu":
            approximate = kwargs.get("approximate", rest[0] if rest else "none")
            if approximate == "tanh":
                return _gelu_tanh(x)
            if approximate != "none":
                raise Unsupported(f"gelu approximate={approximate!r}")
        return sg_op(name, [x])

    return convert


for _overload, _name in _UNARY.items():
    register(_overload)(_make_unary(_name))


def _gelu_tanh(x):
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), as torch computes it.
    x3 = sg_op("mul", [sg_op("mul", [x, x]), x])
    inner = sg_op("add", [x, sg_op("mul_scalar", [x3], 0.044715)])
    t = sg_op("tanh", [sg_op("mul_scalar", [inner], math.sqrt(2.0 / math.pi))])
    return sg_op("mul", [sg_op("mul_scalar", [x], 0.5), sg_op("add_scalar", [t], 1.0)])


def _one_dtype(node):
    """Binary arithmetic on tensors of one dtype (sinkgraph has no type promotion)."""
    dtypes = {v.dtype for v in (node_value(a) for a in node.args[:2])
              if isinstance(v, torch.Tensor)}
    if len(dtypes) > 1:
        return f"{' and '.join(sorted(str(d) for d in dtypes))} operands (type promotion)"
    return None


@register(aten.add.Tensor, aten.add.Scalar, capability=_one_dtype)
def _add(a, b, alpha=1):
    if alpha != 1:
        b = sg_op("mul_scalar", [b], float(alpha)) if _is_tensor(b) else b * alpha
    if _is_tensor(a) and not _is_tensor(b):
        return sg_op("add_scalar", [a], float(b))
    if _is_tensor(b) and not _is_tensor(a):
        return sg_op("add_scalar", [b], float(a))
    return binary("add", a, b)


@register(aten.sub.Tensor, aten.sub.Scalar, capability=_one_dtype)
def _sub(a, b, alpha=1):
    if alpha != 1:
        b = sg_op("mul_scalar", [b], float(alpha)) if _is_tensor(b) else b * alpha
    if _is_tensor(a) and not _is_tensor(b):
        return sg_op("add_scalar", [a], -float(b))
    return binary("sub", a, b)


@register(aten.rsub.Scalar, aten.rsub.Tensor, capability=_one_dtype)
def _rsub(a, b, alpha=1):
    return _sub(b, a, alpha) if _is_tensor(b) else sg_op(
        "add_scalar", [sg_op("mul_scalar", [a], -float(alpha))], float(b))


@register(aten.mul.Tensor, aten.mul.Scalar, capability=_one_dtype)
def _mul(a, b):
    if _is_tensor(a) and not _is_tensor(b):
        return sg_op("mul_scalar", [a], float(b))
    if _is_tensor(b) and not _is_tensor(a):
        return sg_op("mul_scalar", [b], float(a))
    return binary("mul", a, b)


@register(aten.reciprocal.default)
def _reciprocal(x):
    return binary("div", 1.0, x)


@register(aten.div.Tensor, aten.div.Scalar, capability=_one_dtype)
def _div(a, b):
    if _is_tensor(a) and not _is_tensor(b):
        return sg_op("mul_scalar", [a], 1.0 / float(b)) if b != 0 else binary("div", a, b)
    return binary("div", a, b)


