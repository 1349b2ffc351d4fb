"""sinkgraph: graph capture and replay for PyTorch models on the CPU.

    import torch, sinkgraph
    config = sinkgraph.CompilerConfig()
    config.mode = "reduce-overhead"
    backend = sinkgraph.get_backend(compiler_config=config)
    opt_model = sinkgraph.compile(model, backend=backend)  # torch >= 2.0: torch.compile too
    with torch.no_grad():
        y = opt_model(x)

See docs/python.md.
"""

from . import _C
from ._C import Error
from .backend import Backend, get_backend
from .config import CompilerConfig
from .dynamo import CompiledModule, compile  # noqa: A004

__all__ = ["CompilerConfig", "Error", "compile", "counters", "explain", "get_backend",
           "set_log_level"]

__version__ = _C.version()


def set_log_level(level):
    """The C++ library's log level: "error", "warn" (the default), "info" (every
    trace, capture, re-capture and fallback as it happens) or "debug"; the
    environment variable SINKGRAPH_LOG sets the starting level."""
    _C.set_log_level(level)


def _target(obj):
    if isinstance(obj, (CompiledModule, Backend)):
        return obj
    backend = getattr(obj, "_sinkgraph_backend", None)
    if backend is not None:
        return backend
    raise TypeError(f"expected what sinkgraph.compile or sinkgraph.get_backend returned, got "
                    f"{type(obj).__name__} (for torch.compile, pass the backend)")


def counters(opt_model):
    """TorchAir's counters, summed over the model's graphs, plus `fallback_nodes`."""
    t = _target(opt_model)
    if isinstance(t, Backend):
        total = {}
        for f in t.compiled:
            for k, v in f.counters().items():
                total[k] = total.get(k, 0) + v
        return total
    return t.counters()


def explain(opt_model):
    """Why each graph was traced and captured, and what runs it."""
    t = _target(opt_model)
    if isinstance(t, Backend):
        return "\n".join(f.explain() for f in t.compiled)
    return t.explain()
