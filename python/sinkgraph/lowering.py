"""Lowering before partitioning: the decomposition table and constant folding."""

import torch
from torch._decomp import core_aten_decompositions
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import converters as cv


def decompositions(custom=None):
    """Core ATen decompositions, less the operators sinkgraph converts whole.

    A decomposition replaces an operator by simpler ones before the backend
    sees the graph; an operator with a converter of its own (index_copy,
    native_layer_norm, gelu, hardswish, ...) is kept, so its one sinkgraph
    kernel runs instead of the pieces. ``custom`` (get_backend's
    custom_decompositions) is applied on top, as TorchAir's is.
    """
    table = dict(core_aten_decompositions())
    for op in list(table):
        if cv.lookup(op) is not None:
            del table[op]
    table.update(custom or {})
    return table


def _foldable(node):
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in node.target.tags:
        return False
    return not any(a.alias_info is not None and a.alias_info.is_write
                   for a in node.target._schema.arguments)


def fold_constants(gm):
    """Evaluates once, at compile time, every node computed only from constants.

    A causal mask built with ones/tril/bitwise_not/masked_fill or an arange of
    a fixed length depends on no graph input and no tensor attribute: each
    is computed here with torch and becomes a constant (get_attr) of the
    graph, never run per call. Returns how many constants it made.
    """
    graph = gm.graph
    values = {}
    for node in graph.nodes:
        # Only values made inside the graph are constants: a tensor attribute
        # (get_attr) may be a buffer some graph writes in place (transformers'
        # static KV cache is one), and folding an expression of it would
        # freeze its value at compile time.
        if not _foldable(node):
            continue
        inputs = node.all_input_nodes
        if any(i not in values for i in inputs):
            continue
        args = torch.fx.node.map_arg(node.args, lambda n: values[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: values[n])
        if any(isinstance(a, torch.SymInt) for a in torch.utils._pytree.tree_leaves((args, kwargs))):
            continue
        with unset_fake_temporarily():  # AOTAutograd calls compilers under its fake mode
            values[node] = node.target(*args, **kwargs)
    folded = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node not in values:
            continue
        value = values[node]
        if not isinstance(value, torch.Tensor):
            continue
        if any(u.op == "output" for u in node.users):
            continue  # an output is a fresh tensor per call, never a shared constant
        if all(u in values for u in node.users):
            continue  # only feeds other folded nodes
        name = f"_sg_const{folded}"
        gm.register_buffer(name, value, persistent=False)
        with graph.inserting_before(node):
            const = graph.get_attr(name)
        const.meta = dict(node.meta)
        node.replace_all_uses_with(const)
        folded += 1
    graph.eliminate_dead_code()
    gm.recompile()
    return folded
