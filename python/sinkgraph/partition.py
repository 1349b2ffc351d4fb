"""Capability-based partitioning: what sinkgraph converts, and what stays with torch.

Every call in AOTAutograd's graph is asked ``why_unsupported``: a node with a
converter, CPU tensors of dtypes sinkgraph has, and a converter that accepts
this particular call is supported. torch's CapabilityBasedPartitioner groups
supported nodes into the largest regions that keep the graph acyclic; each
becomes a sinkgraph Region (graph.py), and the rest runs as torch code between
them: the fallback nodes, counted and named in explain().
"""

import operator

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from . import converters as cv
from .graph import supported_dtype


def _tensor_metas(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


# sinkgraph's arithmetic kernels are floating-point only; these operators only
# move or copy elements, so any dtype the runtime has is fine for them.
_ANY_DTYPE = {"view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "permute",
              "transpose", "t", "unsqueeze", "squeeze", "select", "slice", "split",
              "split_with_sizes", "cat", "stack", "clone", "detach", "alias", "lift_fresh_copy",
              "copy_", "index_copy", "embedding", "argmax", "full", "full_like", "arange", "empty",
              "zeros",
              # selects elements (its capability check asks for a bool condition)
              "where",
              # compare in the operands' own dtype, exactly; the logical ones
              # take bool tensors only (their capability checks say so)
              "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor",
              "bitwise_not", "logical_and", "logical_or", "logical_xor", "logical_not",
              # a conversion to a floating dtype (its capability check names the sources)
              "_to_copy",
              # its int64 indices are refused by the converter when anything reads them
              "max_pool2d_with_indices"}
# Integer add and sub are exact in the C++ kernels (one template for every
# dtype): the position arithmetic of transformers' caches (cache_position + k).
_INTEGER_EXACT = {"add", "sub"}


def _exact_integer_call(node, metas):
    """An add/sub whose tensors are all of one integer dtype, alpha 1 and any
    scalar operand an int: computed exactly, never through floating point."""
    if getattr(node.target, "_opname", None) not in _INTEGER_EXACT:
        return False
    if len({t.dtype for t in metas}) != 1 or metas[0].dtype not in (torch.int64, torch.int32):
        return False
    scalars = [a for a in node.args[:2] if not isinstance(a, torch.fx.Node)]
    return node.kwargs.get("alpha", 1) == 1 and len(node.args) <= 2 and all(
        isinstance(s, int) and not isinstance(s, bool) for s in scalars)


def why_unsupported(node):
    """None when sinkgraph converts `node`; else the reason, in words."""
    if node.op != "call_function":
        return f"a {node.op} node"
    if node.target is operator.getitem:
        src = node.args[0]
        return None if why_unsupported(src) is None else "an item of an unsupported node"
    converter = cv.lookup(node.target)
    if converter is None:
        return "no converter"
    metas = _tensor_metas(node.meta.get("val"))
    for a in node.all_input_nodes:
        metas += _tensor_metas(a.meta.get("val"))
    for t in metas:
        if t.device.type != "cpu":
            return f"a tensor on {t.device} (sinkgraph runs on the CPU)"
        if not supported_dtype(t.dtype):
            return f"dtype {t.dtype}"
    packet = getattr(node.target, "_opname", str(node.target))
    if packet not in _ANY_DTYPE and any(not (t.is_floating_point()) for t in metas) and \
            not _exact_integer_call(node, metas):
        return "integer or bool arithmetic (sinkgraph computes in floating point)"
    check = cv.capability(node.target)
    if check is not None:
        return check(node)
    return None


class _Support(OperatorSupport):
    def __init__(self):
        super().__init__()
        self.reasons = {}

    def is_node_supported(self, submodules, node):
        reason = why_unsupported(node)
        if reason is not None:
            self.reasons[node.name] = reason
        return reason is None


def partition(gm):
    """Fuses supported regions into submodules of `gm` (named fused_N).

    Returns (gm, fallback): fallback lists (node text, reason) for every call
    left to torch.
    """
    support = _Support()
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    parts = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(parts)
    fallback = []
    for node in fused.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            fallback.append((node.format_node(), support.reasons.get(node.name, "not in a region"),
                             str(node.target)))
    return fused, fallback
