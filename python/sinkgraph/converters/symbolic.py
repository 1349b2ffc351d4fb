"""Integer arithmetic on sizes: the SymInt nodes of graphs with dynamic shapes.

When Dynamo marks a dimension dynamic (a second batch size, by default), the
graph computes sizes from it: ``mul = 5 * s0`` feeding a view's shape. A
region sees every SymInt input as a Python int (each value its own graph key,
Note [Shape keys in the PyTorch front end] in graph.py), so these converters
compute in Python at trace time and record nothing.

A size computed inside a region and handed to torch would cross as a constant
of the trace, so the capability check only takes a size whose every user is a
node sinkgraph converts, never the graph's output.
"""

import math
import operator

import torch

from .registry import aten, register


def _sizes_only_feed_sinkgraph(node):
    from ..partition import why_unsupported  # partition imports the converters
    val = node.meta.get("val")
    if not isinstance(val, (int, torch.SymInt)) or isinstance(val, bool):
        return f"a {type(val).__name__} result (sinkgraph's size arithmetic is on integers)"
    for u in node.users:
        if u.op != "call_function" or why_unsupported(u) is not None:
            return "a size that torch code reads (it would cross as a traced constant)"
    return None


def _python(fn):
    def convert(*args):
        return fn(*args)

    return convert


_BINARY = {operator.add: operator.add, operator.sub: operator.sub, operator.mul: operator.mul,
           operator.floordiv: operator.floordiv, operator.mod: operator.mod,
           operator.neg: operator.neg, torch.sym_max: max, torch.sym_min: min}
for _op, _fn in _BINARY.items():
    register(_op, capability=_sizes_only_feed_sinkgraph)(_python(_fn))


@register(aten.sym_size.int, capability=_sizes_only_feed_sinkgraph)
def _sym_size(x, dim):
    return x.shape[dim]


@register(aten.sym_numel.default, capability=_sizes_only_feed_sinkgraph)
def _sym_numel(x):
    return math.prod(x.shape)
