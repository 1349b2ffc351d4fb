"""sinkgraph: graph capture and replay for PyTorch models, as a torch.compile backend.

    import torch, sinkgraph
    config = sinkgraph.CompilerConfig()
    config.mode = "reduce-overhead"          # or "max-autotune", "eager"
    opt_model = torch.compile(model, backend=sinkgraph.get_backend(compiler_config=config))
    # or, without importing sinkgraph: torch.compile(model, backend="sinkgraph")

See docs/python.md.
"""

from . import _C
from ._C import Error
from .backend import Backend, get_backend
from .config import CompilerConfig
from .visibility import counters, explain, reset_counters

__all__ = ["Backend", "CompilerConfig", "Error", "counters", "explain", "get_backend",
           "reset_counters", "set_log_level"]

__version__ = _C.version()


def set_log_level(level):
    """The C++ library's log level: "error", "warn" (the default), "info" (every
    compile, trace, capture, re-capture and fallback as it happens) or "debug";
    the environment variable SINKGRAPH_LOG sets the starting level."""
    _C.set_log_level(level)
