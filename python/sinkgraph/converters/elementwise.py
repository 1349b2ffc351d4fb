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
    aten.cos.default: "cos",
    aten.sin.default: "sin",
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


def _integer(a, b):
    """Whether a binary operation's tensor operand is an integer tensor."""
    return (a if _is_tensor(a) else b).dtype in ("i64", "i32")


@register(aten.add.Tensor, aten.add.Scalar, capability=_one_dtype)
def _add(a, b, alpha=1):
    if _integer(a, b):
        return binary("add", a, b)  # integers: exact (the partition allows alpha 1 only)
    if alpha != 1:
        b = sg_op("mul_scalar", [b], float(alpha)) if _is_tensor(b) else b * alpha
    if _is_tensor(a) and not _is_tensor(b):
        return sg_op("add_scalar", [a], float(b))
    if _is_tensor(b) and not _is_tensor(a):
        return sg_op("add_scalar", [b], float(a))
    return binary("add", a, b)


@register(aten.sub.Tensor, aten.sub.Scalar, capability=_one_dtype)
def _sub(a, b, alpha=1):
    if _integer(a, b):
        return binary("sub", a, b)
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


# ---- powers and dtype conversion ----------------------------------------------------

# x ** e for the exponents torch's CPU kernel computes by a formula of its
# own (pow_tensor_scalar_optimized_kernel): the same formula here is the same
# bits. RMSNorm's `x.pow(2)` is the common one (transformers' Llama, Qwen2).
_POWERS = {
    2.0: lambda x: sg_op("mul", [x, x]),
    3.0: lambda x: sg_op("mul", [sg_op("mul", [x, x]), x]),
    0.5: lambda x: sg_op("sqrt", [x]),
    -0.5: lambda x: sg_op("rsqrt", [x]),
    -1.0: lambda x: binary("div", 1.0, x),
}


def _pow_capability(node):
    x, e = node_value(node.args[0]), node.args[1]
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        return "pow of a non-floating tensor"
    if not isinstance(e, (int, float)) or float(e) not in _POWERS:
        return f"pow with exponent {e!r} (sinkgraph computes 2, 3, 0.5, -0.5 and -1)"
    return None


def _where_capability(node):
    cond, a, b = (node_value(x) for x in node.args[:3])
    if not all(isinstance(t, torch.Tensor) for t in (cond, a, b)):
        return "where with a scalar operand"
    if cond.dtype != torch.bool:
        return f"where with a {cond.dtype} condition"
    if a.dtype != b.dtype:
        return f"where of {a.dtype} and {b.dtype} (type promotion)"
    return None


@register(aten.where.self, capability=_where_capability)
def _where(cond, a, b):
    return sg_op("where", [cond, a, b])


@register(aten.pow.Tensor_Scalar, capability=_pow_capability)
def _pow(x, exponent):
    power = _POWERS.get(float(exponent)) if isinstance(exponent, (int, float)) else None
    if power is None:
        raise Unsupported(f"pow with exponent {exponent!r}")
    return power(x)


_FLOATING = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_INTEGER_SOURCES = {torch.int32, torch.int64, torch.bool}


def _to_copy_capability(node):
    """A dtype conversion on the same device, nothing else: to a floating dtype
    or bool, from a floating, integer or bool one (sinkgraph's copy rounds to
    nearest even, as torch does)."""
    x = node_value(node.args[0])
    dtype = node.kwargs.get("dtype")
    if not isinstance(x, torch.Tensor):
        return "_to_copy of a non-tensor"
    extra = {k: v for k, v in node.kwargs.items()
             if k not in ("dtype", "device", "layout", "pin_memory", "non_blocking")
             and v is not None}
    if extra or node.kwargs.get("layout") not in (None, torch.strided):
        return f"_to_copy with {sorted(extra) or 'a layout'} (sinkgraph converts the dtype only)"
    device = node.kwargs.get("device")
    if device is not None and torch.device(device) != x.device:
        return f"_to_copy to {device} (another device)"
    if dtype is None or dtype == x.dtype:
        return None
    if dtype not in _FLOATING and dtype != torch.bool:
        return (f"conversion to {dtype} (sinkgraph converts to float32, float16, bfloat16 "
                "and bool)")
    if x.dtype not in _FLOATING and x.dtype not in _INTEGER_SOURCES:
        return f"conversion from {x.dtype}"
    return None


@register(aten._to_copy.default, capability=_to_copy_capability)
def _to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        raise Unsupported(f"_to_copy to {memory_format}")
    if dtype is None or _FLOATING.get(dtype, "bool" if dtype == torch.bool else None) == x.dtype:
        return sg_op("contiguous", [x])
    if dtype == torch.bool:
        # torch's x.to(bool) is x != 0 in x's dtype: NaN is True, -0.0 False
        # (as HF's attention masks are made: an int64 mask to bool).
        return sg_op("compare", [x, full([], 0, x.dtype)], _COMPARISONS["ne"])
    if dtype not in _FLOATING:
        raise Unsupported(f"conversion to {dtype}")
    return sg_op("copy_", [full(list(x.shape), 0.0, _FLOATING[dtype]), x])


# ---- comparisons -----------------------------------------------------------------

_COMPARISONS = {"eq": 0, "ne": 1, "lt": 2, "le": 3, "gt": 4, "ge": 5}  # ops::Comparison


def _comparison_capability(node):
    a, b = (node_value(x) for x in node.args[:2])
    tensors = [t for t in (a, b) if isinstance(t, torch.Tensor)]
    if len({t.dtype for t in tensors}) > 1:
        return f"comparison of {tensors[0].dtype} and {tensors[1].dtype} (type promotion)"
    dtype = tensors[0].dtype
    if dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                     torch.bool):
        return f"comparison in {dtype}"
    for s in (a, b):
        if isinstance(s, torch.Tensor):
            continue
        if not isinstance(s, (bool, int, float)):
            return f"comparison with a {type(s).__name__} operand"
        if isinstance(s, float) and not dtype.is_floating_point:
            return f"comparison of a {dtype} tensor with a float (type promotion)"
        if dtype == torch.bool and not isinstance(s, bool):
            return "comparison of a bool tensor with a number (type promotion)"
        if isinstance(s, int) and abs(s) > 2**53:
            return f"comparison with {s} (past 2^53, not carried exactly)"
    return None


def _make_comparison(code):
    def convert(a, b):
        if not _is_tensor(b):
            b = full([], b, a.dtype)
        if not _is_tensor(a):
            a = full([], a, b.dtype)
        return sg_op("compare", [a, b], code)

    return convert


for _name, _code in _COMPARISONS.items():
    for _overload in ("Tensor", "Scalar"):
        register(getattr(getattr(aten, _name), _overload),
                 capability=_comparison_capability)(_make_comparison(_code))


def _bool_operands(node):
    values = [node_value(x) for x in node.args]
    if not all(isinstance(v, torch.Tensor) and v.dtype == torch.bool for v in values):
        return "a bitwise or logical operation on other than bool tensors"
    return None


def _false():
    return full([], 0, "bool")


# On bool tensors: through where and compare (no kernels of their own).
@register(aten.bitwise_and.Tensor, aten.logical_and.default, capability=_bool_operands)
def _and(a, b):
    return sg_op("where", [a, b, _false()])


@register(aten.bitwise_or.Tensor, aten.logical_or.default, capability=_bool_operands)
def _or(a, b):
    return sg_op("where", [a, full([], 1, "bool"), b])


@register(aten.bitwise_xor.Tensor, aten.logical_xor.default, capability=_bool_operands)
def _xor(a, b):
    return sg_op("compare", [a, b], _COMPARISONS["ne"])


@register(aten.bitwise_not.default, aten.logical_not.default, capability=_bool_operands)
def _not(a):
    return sg_op("compare", [a, _false()], _COMPARISONS["eq"])
