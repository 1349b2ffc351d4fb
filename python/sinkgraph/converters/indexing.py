"""Indexed writes: index_copy (a KV cache written at a tensor position)."""

import torch

from .registry import Unsupported, aten, register, sg_op, _wrap_dim


def _index_copy_capability(node):
    index = node.args[2].meta.get("val")
    if index is None or index.ndim != 1 or index.shape[0] != 1:
        return "index_copy of more than one position (sinkgraph writes one position per row)"
    return None


def index_copy_into(dst, dim, index, src):
    """dst[..., index[0], ...] = src along `dim`, written into dst's memory;
    returns dst after the write (a view of the write's result).

    sinkgraph's index_copy_rows_ writes dst[b, index[b], ...] = src[b, ...]:
    dst is viewed with `dim` moved to position 1 (a strided view; the kernel
    follows strides) and the one position broadcast over dst's leading rows.
    """
    dim = _wrap_dim(dim, dst.ndim)
    if index.shape != (1,) or src.shape[dim] != 1:
        raise Unsupported("index_copy of more than one position")
    if dim == 0:
        rows_dst = sg_op("unsqueeze", [dst], 0)  # [1, S, ...]
        rows_src = src  # [1, ...]
        rows = 1
    else:
        order = [0, dim] + [d for d in range(1, dst.ndim) if d != dim]
        rows_dst = sg_op("permute", [dst], order)  # [B, S, rest...]
        rows_src = sg_op("squeeze", [sg_op("slice", [src], dim, 0, 1, 1)], dim)  # [B, rest...]
        rows = dst.shape[0]
    positions = sg_op("expand", [index], [rows])
    written = sg_op("index_copy_rows_", [rows_dst, positions, rows_src])
    # dst after the write, named through the write's result (docs/ir.md, "In-place
    # operators"), so that every later reader depends on the write.
    if dim == 0:
        return sg_op("squeeze", [written], 0)
    return sg_op("permute", [written], [order.index(i) for i in range(dst.ndim)])


@register(aten.index_copy.default, capability=_index_copy_capability)
def _index_copy(dst, dim, index, src):
    # Functional: the result is a new tensor (the graph's final copy_ writes it
    # back into the caller's buffer; Note [Writes into graph inputs] in graph.py
    # turns the pair into one in-place write when nothing else reads dst).
    return index_copy_into(sg_op("contiguous", [dst]), dim, index, src)


def _embedding_capability(node):
    weight, ids = (node.args[0].meta.get("val"), node.args[1].meta.get("val"))
    if ids is None or ids.dtype not in (torch.int32, torch.int64):
        return "embedding with non-integer indices"
    if weight is None or weight.ndim != 2:
        return "embedding of a weight that is not 2-D"
    return None


@register(aten.embedding.default, capability=_embedding_capability)
def _embedding(weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # padding_idx and the rest only change the gradient: the forward is a gather.
    return sg_op("embedding", [weight, ids])
