"""Rewrites of AOTAutograd's ATen graph that max-autotune makes before partitioning.

Note [Written-out attention]
Many hand-written models (nanoGPT, BERT- and ViT-style code, older
transformers attention classes) compute attention as
``softmax(q @ k.transpose(-2, -1) * c) @ v`` instead of calling
``scaled_dot_product_attention``. Under the core decompositions that is a
chain of ATen nodes::

    A = view(clone(expand(q4)))      [B*H, L, D]   q4: [B, H, L, D]
    K = view(clone(expand(kt4)))     [B*H, D, S]   kt4: [B, H, D, S]
    s = view(bmm(A, K), [B, H, L, S])
    p = _softmax(mul(s, c) | div(s, 1/c) | s, -1, False)
    V = view(clone(expand(v4)))      [B*H, S, D]   v4: [B, H, S, D]
    y = view(bmm(view(expand(p)), V), [B, H, L, D])

where every node between q4 and A (likewise for kt4, v4 and p) only
re-reads its input in the same element order (view, reshape, clone, an
expand that broadcasts nothing, squeeze, unsqueeze). ``fuse_attention``
replaces ``y`` by ``scaled_dot_product_attention(q4, kt4^T, v4, scale=c)``,
which the attention converter turns into one ``sdpa``: the [B, H, L, S]
scores are never stored, the head copies (the clones) disappear, and the
kernel reads q, k and v in place through their strides. The two forms are
equal up to float rounding (the same sums in another order).

Where: only when the query rows L are known to be at most 32
(_MAX_FUSED_ROWS). Up to there both products run sinkgraph's row kernel and
the fused kernel measured the same time as the written-out graph (10 and 32
rows, docs/performance.md "Written-out attention"); past it the products run
oneDNN's matmul (Note [Matrix products through oneDNN]), which with a
separate softmax was 1-9% faster than the one-kernel sdpa at 64 to 256 rows,
about even once sdpa took query rows in blocks, and even again since sdpa
runs the same two products past 32 rows (Note [Long attention through
products]): no gain to pay for, and max-autotune must not be slower than
the graph as written. A dynamic L (no bound known at compile time) is left
as written too.

What is left alone: any intermediate read by another node (the weights
returned as well, as with need_weights), a softmax over another dim or to
another dtype, and masked attention (masked_fill or an added mask before the
softmax). A query row whose every key is masked is NaN in the written-out
form and zeros in torch's CPU scaled_dot_product_attention, so turning one
into the other would change a result; the unmasked form has no such row.
Only max-autotune rewrites (as its other pattern fusions): reduce-overhead
captures the graph's own operators.
"""

import operator

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .converters.registry import known_equal

aten = torch.ops.aten

# The most query rows a written-out attention is fused at (see the note).
_MAX_FUSED_ROWS = 32

# Nodes that re-read their first argument in the same (row-major) element
# order: walking back through them from a bmm operand finds the 4-D tensor the
# model wrote. expand qualifies only when it broadcasts nothing (checked).
_SAME_ORDER = {aten.view.default, aten._unsafe_view.default, aten.reshape.default,
               aten.clone.default, aten.expand.default, aten.squeeze.dim, aten.squeeze.dims,
               aten.squeeze.default, aten.unsqueeze.default, aten.alias.default}


def _val(node):
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _same_shape(a, b):
    return len(a) == len(b) and all(known_equal(x, y) for x, y in zip(a, b))


def _single_user(node):
    return len(node.users) == 1


def _source4(node, lead, last2):
    """The furthest 4-D tensor [lead..., last2...] behind `node` through
    same-order nodes, or None. (Its other readers keep the nodes on the way.)"""
    found = None
    cur = node
    while True:
        v = _val(cur)
        if v is None:
            return found
        if v.ndim == 4 and _same_shape(v.shape[:2], lead) and _same_shape(v.shape[2:], last2):
            found = cur
        if cur.op != "call_function" or cur.target not in _SAME_ORDER:
            return found
        src = cur.args[0]
        sv = _val(src)
        if sv is None:
            return found
        if cur.target is aten.expand.default and not _same_shape(sv.shape, v.shape):
            return found  # a real broadcast: not the same elements
        cur = src


def _result4(node):
    """The furthest 4-D node after `node` through single-reader same-order
    nodes (the product's result as [B, H, L, D]), or None."""
    found = None
    cur = node
    while _single_user(cur):
        (user,) = cur.users
        if user.op != "call_function" or user.target not in _SAME_ORDER:
            break
        uv, cv = _val(user), _val(cur)
        if uv is None or cv is None:
            break
        if user.target is aten.expand.default and not _same_shape(uv.shape, cv.shape):
            break
        cur = user
        if uv.ndim == 4:
            found = cur
    return found


def _back(node):
    """Walks back from `node` through same-order nodes read by one node only."""
    cur = node
    while cur.op == "call_function" and cur.target in _SAME_ORDER and _single_user(cur):
        src = cur.args[0]
        if cur.target is aten.expand.default and (
                _val(src) is None or not _same_shape(_val(src).shape, _val(cur).shape)):
            break
        cur = src
    return cur


def _scale_of(node):
    """(scores, c) when node is scores * c, c * scores or scores / c with c a
    Python number; else None."""
    if node.op != "call_function" or len(node.args) != 2 or node.kwargs:
        return None
    a, c = node.args
    if node.target in (aten.mul.Tensor, aten.mul.Scalar) and not isinstance(a, torch.fx.Node):
        a, c = c, a
    if not isinstance(a, torch.fx.Node) or isinstance(c, bool) or not isinstance(c, (int, float)):
        return None
    if node.target in (aten.mul.Tensor, aten.mul.Scalar):
        return a, float(c)
    if node.target in (aten.div.Tensor, aten.div.Scalar) and c != 0:
        return a, 1.0 / float(c)
    return None


def _match(bmm2):
    """The rewrite of one written-out attention ending at bmm2, or None."""
    p3, v3 = bmm2.args
    # the product's result, seen as [B, H, L, D]
    out4 = _result4(bmm2)
    if out4 is None:
        return None
    ov = _val(out4)
    b, h, l, d = ov.shape
    if not statically_known_true(l <= _MAX_FUSED_ROWS):
        return None
    # p3 back to the softmax
    soft = _back(p3)
    if soft.op != "call_function" or soft.target is not aten._softmax.default or \
            not _single_user(soft):
        return None
    sv = _val(soft)
    if sv is None or sv.ndim != 4 or soft.args[1] not in (-1, 3) or soft.args[2]:
        return None
    if not _same_shape(sv.shape[:3], (b, h, l)):
        return None
    s = sv.shape[3]
    scale = 1.0
    pre = soft.args[0]
    scaled = _scale_of(pre)
    if scaled is not None:
        if not _single_user(pre):
            return None
        pre, scale = scaled
    # pre: the scores [B, H, L, S], a same-order view of bmm1
    bmm1 = _back(pre)
    if bmm1.op != "call_function" or bmm1.target is not aten.bmm.default or \
            not _single_user(bmm1):
        return None
    q4 = _source4(bmm1.args[0], (b, h), (l, d))
    kt4 = _source4(bmm1.args[1], (b, h), (d, s))
    v4 = _source4(v3, (b, h), (s, d))
    if q4 is None or kt4 is None or v4 is None:
        return None
    dtypes = {_val(n).dtype for n in (q4, kt4, v4)} | {sv.dtype}
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        return None
    return out4, q4, kt4, v4, scale


def _fake_call(target, *args, **kwargs):
    """Runs target on the nodes' fake values: the new node's meta["val"]."""
    vals = torch.fx.node.map_arg((args, kwargs), _val)
    return target(*vals[0], **vals[1])


def fuse_attention(gm):
    """Note [Written-out attention]: returns how many attentions became one
    scaled_dot_product_attention."""
    sdpa = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if sdpa is None:
        return 0
    sdpa = sdpa.default
    graph = gm.graph
    done = 0
    for bmm2 in [n for n in graph.nodes if n.op == "call_function" and
                 n.target is aten.bmm.default]:
        m = _match(bmm2)
        if m is None:
            continue
        out4, q4, kt4, v4, scale = m
        with graph.inserting_before(out4):
            k4 = graph.call_function(aten.permute.default, (kt4, [0, 1, 3, 2]))
            k4.meta["val"] = _fake_call(aten.permute.default, kt4, [0, 1, 3, 2])
            call = graph.call_function(sdpa, (q4, k4, v4), {"scale": scale})
            call.meta["val"] = _fake_call(sdpa, q4, k4, v4, scale=scale)
            y = graph.call_function(operator.getitem, (call, 0))
            y.meta["val"] = call.meta["val"][0]
        out4.replace_all_uses_with(y)
        done += 1
    if done:
        graph.eliminate_dead_code()
        graph.lint()
        gm.recompile()
    return done
