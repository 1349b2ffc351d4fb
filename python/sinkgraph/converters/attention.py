"""Attention: PyTorch's fused multi-head attention and encoder-layer kernels."""

import math
import operator

import torch

from .registry import (Copies, Unsupported, aten, binary, contiguous, full, known_equal,
                       linear_product, matmul2d, node_value, optional_overload, register, sg_op,
                       transpose, view, _is_tensor, _wrap_dim)


# ---- PyTorch's fused transformer fast paths -----------------------------------------------
#
# Under torch.no_grad() in eval mode, nn.TransformerEncoderLayer and
# nn.MultiheadAttention call one fused ATen kernel. They are decomposed here
# into sinkgraph operators, so that the passes see (and max-autotune fuses)
# every part.


def _linear_bias(x, w, b):
    out = linear_product(x, w)
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


def _arg(node, index, name, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _fused_capability(x_name, mask_index):
    """The fused kernels' calls the converters take: batched [B, L, E], no mask."""

    def check(node):
        x = node_value(node.args[0])
        if x is None or x.ndim != 3:
            return f"unbatched {x_name} (sinkgraph takes [B, L, E])"
        if _arg(node, mask_index, "mask") is not None:
            return "a mask (sinkgraph's attention takes none)"
        return None

    return check


@register(aten._native_multi_head_attention.default,
          capability=_fused_capability("multi-head attention", 9))
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


@register(aten._transformer_encoder_layer_fwd.default,
          capability=_fused_capability("encoder layer", 18))
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



# ---- scaled_dot_product_attention ---------------------------------------------------------
#
# F.scaled_dot_product_attention on the CPU is
# aten._scaled_dot_product_flash_attention_for_cpu in AOTAutograd's graphs
# (nn.MultiheadAttention's general path, nn.TransformerDecoderLayer,
# torchvision's VisionTransformer). Its core decomposition is the math path,
# whose _safe_softmax needs eq/any/where, which sinkgraph has not; with a
# converter the operator stays whole and becomes one `sdpa`, `sdpa_mask`
# with an additive attn_mask (transformers' padding and causal masks), or
# `sdpa_causal` for is_causal. A query row whose every key is masked gives
# zeros, as torch's CPU kernel does.


def _users_of_item(node, index):
    """The users of item `index` of a multi-output node (its getitem nodes' users)."""
    users = []
    for u in node.users:
        if u.target is operator.getitem and u.args[1] == index:
            users.extend(u.users)
        elif u.target is not operator.getitem:
            users.append(u)
    return users


def _flash_cpu_capability(node):
    args = dict(zip(("query", "key", "value", "dropout_p", "is_causal"), node.args))
    args.update(node.kwargs)
    if args.get("dropout_p", 0.0) != 0.0:
        return "scaled_dot_product_attention with dropout"
    if args.get("is_causal", False) and args.get("attn_mask") is not None:
        return "scaled_dot_product_attention with both is_causal and attn_mask"
    q, k, v = (args[n].meta.get("val") for n in ("query", "key", "value"))
    if q is None or k is None or v is None:
        return "scaled_dot_product_attention without shape metadata"
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        return f"scaled_dot_product_attention of {q.ndim}-D q (sinkgraph takes [B, H, L, D])"
    same = all(known_equal(a, c) for a, c in zip(k.shape, v.shape)) and all(
        known_equal(q.shape[i], k.shape[i]) for i in (0, 3))
    # Grouped-query attention (enable_gqa): q's heads a multiple of k's.
    groups = (isinstance(q.shape[1], int) and isinstance(k.shape[1], int) and k.shape[1] > 0
              and q.shape[1] % k.shape[1] == 0)
    if not same or not groups:
        return (f"scaled_dot_product_attention of q{tuple(q.shape)}, k{tuple(k.shape)}, "
                f"v{tuple(v.shape)} (sinkgraph needs one batch and head size, k and v alike, "
                "and q's heads a multiple of k's)")
    mask = args.get("attn_mask")
    if mask is not None:
        # torch turns a bool mask into an additive one (where(mask, 0, -inf))
        # before this operator, so the mask here is q's floating dtype.
        m = mask.meta.get("val") if hasattr(mask, "meta") else None
        if not isinstance(m, torch.Tensor):
            return "scaled_dot_product_attention with an attn_mask that is not a tensor"
        if m.dtype != q.dtype:
            return f"scaled_dot_product_attention with a {m.dtype} attn_mask and {q.dtype} q"
        if m.ndim > 4 or m.ndim < 1:
            return f"scaled_dot_product_attention with a {m.ndim}-D attn_mask"
        want = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])[4 - m.ndim:]
        if not all(known_equal(a, 1) or known_equal(a, w) for a, w in zip(m.shape[:-1], want)) \
                or not known_equal(m.shape[-1], want[-1]):
            return (f"scaled_dot_product_attention with attn_mask{tuple(m.shape)} that does not "
                    f"broadcast to [B, H, L, S] = {tuple(want)}")
    if _users_of_item(node, 1):
        return "scaled_dot_product_attention's logsumexp is used (sinkgraph does not compute it)"
    return None


@register(optional_overload("_scaled_dot_product_flash_attention_for_cpu.default"),
          capability=_flash_cpu_capability)
def _sdpa_flash_cpu(query, key, value, dropout_p=0.0, is_causal=False, attn_mask=None,
                    scale=None):
    if dropout_p != 0.0 or (is_causal and attn_mask is not None):
        raise Unsupported("scaled_dot_product_attention with dropout, or is_causal and attn_mask")
    b, h, n, d = query.shape
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    # The heads-first form reads q, k and v through their strides (a static
    # KV cache in place, grouped kv heads without a copy): [B, L, H * D].
    qkv = [query, key, value]
    if is_causal:
        out = sg_op("sdpa_causal", qkv, h, float(scale))  # [B, L, H * D]
    elif attn_mask is None:
        out = sg_op("sdpa", qkv, h, float(scale))
    else:
        # An additive mask[B|1, H|1, L|1, S], its broadcast dims kept size 1
        # (the kernel reads them with stride 0).
        mask = attn_mask
        if len(mask.shape) < 4:
            mask = view(mask, [1] * (4 - len(mask.shape)) + list(mask.shape))
        out = sg_op("sdpa_mask", qkv + [mask], h, float(scale))
    out = sg_op("permute", [view(out, [b, n, h, d])], [0, 2, 1, 3])
    return (out, None)
