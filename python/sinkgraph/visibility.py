"""counters(), reset_counters() and explain(): what sinkgraph did, and why.

sinkgraph's own counters carry TorchAir's names; Dynamo's graph breaks and
recompiles come from torch's own counters (torch._dynamo.utils.counters),
reported beside them in explain().
"""

from .backend import Backend, all_backends

COUNTER_NAMES = ["captured", "replayed", "recapture_due_to_mutated_input_change",
                 "recapture_due_to_parameter_change", "recapture_due_to_force_recapture",
                 "eager_fallback_due_to_capture_limit", "graphs_compiled", "fallback_nodes"]


def _backends(backend):
    if backend is None:
        return all_backends()
    if isinstance(backend, Backend):
        return [backend]
    raise TypeError("counters/explain: expected what sinkgraph.get_backend returned (or None "
                    f"for every graph of the process), got {type(backend).__name__}")


def counters(backend=None):
    """TorchAir's counters plus graphs_compiled and fallback_nodes.

    Summed over the graphs `backend` compiled, or over every graph in the
    process when `backend` is None.
    """
    total = dict.fromkeys(COUNTER_NAMES, 0)
    for b in _backends(backend):
        for k, v in b.counters().items():
            if k in total:
                total[k] += v
    return total


def reset_counters():
    """Zeroes every counter: the graphs compiled so far are forgotten by counters()
    and explain() (they keep working)."""
    for b in all_backends():
        b.reset_counters()
    _DYNAMO_BASE.clear()
    _DYNAMO_BASE.update(_dynamo_snapshot())


_DYNAMO_BASE = {}


def _dynamo_snapshot():
    from torch._dynamo.utils import counters as dc
    breaks = dict(dc.get("graph_break", {}))
    stats = dict(dc.get("stats", {}))
    return {"graph_breaks": breaks, "unique_graphs": stats.get("unique_graphs", 0),
            "calls_captured": stats.get("calls_captured", 0),
            "recompiles": dict(dc.get("recompiles", {}))}


def dynamo_report(compiled=()):
    """Dynamo's graph breaks and recompiles since the last reset_counters()."""
    now = _dynamo_snapshot()
    base = _DYNAMO_BASE or {"graph_breaks": {}, "unique_graphs": 0, "recompiles": {}}
    recompiles = sum(1 for c in compiled if c.why.startswith("Dynamo recompiled"))
    lines = [f"dynamo: {now['unique_graphs'] - base.get('unique_graphs', 0)} graphs, "
             f"{recompiles} of the graphs listed above from recompiles"]
    for reason, n in now["graph_breaks"].items():
        n -= base["graph_breaks"].get(reason, 0)
        if n > 0:
            lines.append(f"  graph break ({n}x): {reason}")
    for reason, n in now["recompiles"].items():
        n -= base.get("recompiles", {}).get(reason, 0)
        if n > 0:
            lines.append(f"  recompile ({n}x): {reason}")
    return "\n".join(lines)


def explain(backend=None):
    """Every compiled graph: its regions, what fell back to torch and why, and
    for each region when and why it was traced, captured, re-captured or run
    eagerly; then Dynamo's graph breaks and recompiles."""
    parts, compiled = [], []
    for b in _backends(backend):
        for c in list(b.compiled):
            parts.append(c.explain())
            compiled.append(c)
    parts.append(dynamo_report(compiled))
    return "\n".join(parts)
