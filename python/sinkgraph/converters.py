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

from . import _C

aten = torch.ops.aten

_CONVERTERS = {}


class Unsupported(Exception):
    """This call of an ATen operator has no sinkgraph equivalent."""


def optional_overload(qualified):
    """aten's `packet.overload`, or None where this torch has no such operator."""
    packet, _, overload = qualified.partition(".")
    try:
        return getattr(getattr(aten, packet), overload)
    except (AttributeError, RuntimeError):
        return None


def register(*overloads):
    """Registers the decorated function as the converter of each overload (None: skipped)."""

    def wrap(fn):
        for o in overloads:
            if o is None:
                continue
            if o in _CONVERTERS:
                raise RuntimeError(f"converter for {o} registered twice")
            _CONVERTERS[o] = fn
        return fn

    return wrap


def lookup(target):
    return _CONVERTERS.get(target)


def registered():
    """The ATen overloads that have a converter (for docs and tests)."""
    return sorted(str(o) for o in _CONVERTERS)


def sg_op(name, tensors, *scalars):
    return _C.op(name, list(tensors), list(scalars))


def _is_tensor(x):
    return isinstance(x, _C.Tensor)


def _wrap_dim(d, ndim):
    return d + ndim if d < 0 else d


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
    """a[M, K] @ b[K, N]; linear when b is the transpose of a contiguous [N, K]."""
    return sg_op("matmul", [a, b])


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


@register(aten.add.Tensor, aten.add.Scalar)
def _add(a, b, alpha=1):
    if alpha != 1:
        b = sg_op("mul_scalar", [b], float(alpha)) if _is_tensor(b) else b * alpha
    if _is_tensor(a) and not _is_tensor(b):
        return sg_op("add_scalar", [a], float(b))
    if _is_tensor(b) and not _is_tensor(a):
        return sg_op("add_scalar", [b], float(a))
    return binary("add", a, b)


@register(aten.sub.Tensor, aten.sub.Scalar)
def _sub(a, b, alpha=1):
    if alpha != 1:
        b = sg_op("mul_scalar", [b], float(alpha)) if _is_tensor(b) else b * alpha
    if _is_tensor(a) and not _is_tensor(b):
        return sg_op("add_scalar", [a], -float(b))
    return binary("sub", a, b)


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(a, b, alpha=1):
    return _sub(b, a, alpha) if _is_tensor(b) else sg_op(
        "add_scalar", [sg_op("mul_scalar", [a], -float(alpha))], float(b))


@register(aten.mul.Tensor, aten.mul.Scalar)
def _mul(a, b):
    if _is_tensor(a) and not _is_tensor(b):
        return sg_op("mul_scalar", [a], float(b))
    if _is_tensor(b) and not _is_tensor(a):
        return sg_op("mul_scalar", [b], float(a))
    return binary("mul", a, b)


@register(aten.reciprocal.default)
def _reciprocal(x):
    return binary("div", 1.0, x)


@register(aten.div.Tensor, aten.div.Scalar)
def _div(a, b):
    if _is_tensor(a) and not _is_tensor(b):
        return sg_op("mul_scalar", [a], 1.0 / float(b)) if b != 0 else binary("div", a, b)
    return binary("div", a, b)


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
    out = sg_op("linear", [x, w])
    return out if b is None else sg_op("add", [out, b])


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


@register(aten.mean.dim)
def _mean_dim(x, dims, keepdim=False, dtype=None):
    if dtype is not None and dtype != torch.float32:
        raise Unsupported(f"mean with dtype {dtype}")
    if dims is None or len(dims) == 0:
        dims = list(range(x.ndim))
    return sg_op("mean", [x], [_wrap_dim(d, x.ndim) for d in dims], bool(keepdim))


@register(aten.mean.default)
def _mean(x, dtype=None):
    return _mean_dim(x, list(range(x.ndim)), False, dtype)


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


@register(aten.max_pool2d_with_indices.default)
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


# ---- PyTorch's fused transformer fast paths -----------------------------------------------
#
# Under torch.no_grad() in eval mode, nn.TransformerEncoderLayer and
# nn.MultiheadAttention call one fused ATen kernel. They are decomposed here
# into sinkgraph operators, so that the passes see (and max-autotune fuses)
# every part.


def _linear_bias(x, w, b):
    out = sg_op("linear", [x, w])
    return out if b is None else sg_op("add", [out, b])


def _attention(q, k, v, num_heads, mask=None, need_weights=False, average=True):
    """Scaled dot-product attention of q[B, L, E], k/v[B, S, E] with num_heads heads.

    Returns (out[B, L, E], weights or None).
    """
    bsz, L, E = q.shape
    S = k.shape[1]
    d = E // num_heads
    if mask is not None:
        raise Unsupported("attention with a mask")
    if not need_weights:
        # One kernel over the strided slices: no head permutes, no batched
        # products (the `sdpa` operator).
        return sg_op("sdpa", [q, k, v], num_heads, 1.0 / math.sqrt(d)), None

    def heads(t, n):
        return contiguous(sg_op("permute", [view(t, [bsz, n, num_heads, d])], [0, 2, 1, 3]))

    qh = heads(q, L)
    kh = heads(k, S)
    vh = heads(v, S)
    qh = view(qh, [bsz * num_heads, L, d])
    kt = contiguous(transpose(view(kh, [bsz * num_heads, S, d]), 1, 2))  # [BH, d, S]
    vh = view(vh, [bsz * num_heads, S, d])
    scores = sg_op("mul_scalar", [sg_op("matmul", [qh, kt])], 1.0 / math.sqrt(d))
    attn = sg_op("softmax", [scores])  # [BH, L, S]
    out = sg_op("matmul", [attn, vh])  # [BH, L, d]
    out = sg_op("permute", [view(out, [bsz, num_heads, L, d])], [0, 2, 1, 3])
    out = view(contiguous(out), [bsz, L, E])
    weights = None
    if need_weights:
        w = view(attn, [bsz, num_heads, L, S])
        weights = sg_op("mean", [w], [1], False) if average else w
    return out, weights


def _in_projection(query, key, value, qkv_weight, qkv_bias, E):
    if query is key and key is value:
        qkv = _linear_bias(query, qkv_weight, qkv_bias)  # [B, L, 3E]
        return (sg_op("slice", [qkv], 2, 0, E, 1), sg_op("slice", [qkv], 2, E, 2 * E, 1),
                sg_op("slice", [qkv], 2, 2 * E, 3 * E, 1))
    ws = [sg_op("slice", [qkv_weight], 0, i * E, (i + 1) * E, 1) for i in range(3)]
    bs = [None] * 3 if qkv_bias is None else [
        sg_op("slice", [qkv_bias], 0, i * E, (i + 1) * E, 1) for i in range(3)]
    return tuple(_linear_bias(t, contiguous(w), b) for t, w, b in zip((query, key, value), ws, bs))


@register(aten._native_multi_head_attention.default)
def _native_mha(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                mask_type=None):
    if query.ndim != 3:
        raise Unsupported("unbatched multi-head attention")
    q, k, v = _in_projection(query, key, value, qkv_weight, qkv_bias, embed_dim)
    if need_weights:
        q, k, v = contiguous(q), contiguous(k), contiguous(v)
    out, weights = _attention(q, k, v, num_head, mask, need_weights, average_attn_weights)
    return (_linear_bias(out, proj_weight, proj_bias), weights)


@register(aten._transformer_encoder_layer_fwd.default)
def _encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                   mask_type=None):
    if src.ndim != 3:
        raise Unsupported("unbatched encoder layer")
    eps = float(eps)

    def norm(t, w, b):
        return sg_op("layer_norm", [t, w, b], eps)

    def self_attention(t):
        q, k, v = _in_projection(t, t, t, qkv_weight, qkv_bias, embed_dim)
        out, _ = _attention(q, k, v, num_heads, mask)
        return _linear_bias(out, proj_weight, proj_bias)

    def feed_forward(t):
        h = _linear_bias(t, ffn_weight_1, ffn_bias_1)
        h = sg_op("gelu" if use_gelu else "relu", [h])
        return _linear_bias(h, ffn_weight_2, ffn_bias_2)

    x = src
    if norm_first:
        x = sg_op("add", [x, self_attention(norm(x, norm_weight_1, norm_bias_1))])
        x = sg_op("add", [x, feed_forward(norm(x, norm_weight_2, norm_bias_2))])
    else:
        x = norm(sg_op("add", [x, self_attention(x)]), norm_weight_1, norm_bias_1)
        x = norm(sg_op("add", [x, feed_forward(x)]), norm_weight_2, norm_bias_2)
    return x


# ---- in-place variants ------------------------------------------------------------------------
#
# The backend handles an in-place ATen call as its functional form plus a
# write back (Note [In-place ATen calls] in backend.py): these map each
# in-place overload to the functional one.

INPLACE = {
    aten.relu_.default: aten.relu.default,
    aten.hardswish_.default: aten.hardswish.default,
    aten.hardsigmoid_.default: aten.hardsigmoid.default,
    aten.sigmoid_.default: aten.sigmoid.default,
    aten.tanh_.default: aten.tanh.default,
    aten.silu_.default: aten.silu.default,
    aten.add_.Tensor: aten.add.Tensor,
    aten.add_.Scalar: aten.add.Scalar,
    aten.sub_.Tensor: aten.sub.Tensor,
    aten.mul_.Tensor: aten.mul.Tensor,
    aten.mul_.Scalar: aten.mul.Scalar,
    aten.div_.Tensor: aten.div.Tensor,
    aten.div_.Scalar: aten.div.Scalar,
}
