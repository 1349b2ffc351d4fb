"""sinkgraph: graph capture and replay for PyTorch models, as a torch.compile backend.

    import torch, sinkgraph
    config = sinkgraph.CompilerConfig()
    config.mode = "reduce-overhead"          # or "max-autotune", "eager"
    opt_model = torch.compile(model, backend=sinkgraph.get_backend(compiler_config=config))
    # or, without importing sinkgraph: torch.compile(model, backend="sinkgraph")

    # token generation with sinkgraph's own Llama (no torch): what the CLI runs
    out = sinkgraph.Generator("model.safetensors").generate([1], max_new_tokens=64)

See docs/python.md.
"""

from . import _C
from ._C import Error
from .backend import Backend, get_backend
from .config import CompilerConfig
from .generation import GenerationResult, Generator, convert_checkpoint, generate
from .visibility import counters, explain, reset_counters

__all__ = ["Backend", "CompilerConfig", "Error", "GenerationResult", "Generator",
           "convert_checkpoint", "counters", "explain", "generate", "get_backend", "num_threads",
           "onednn_built", "reset_counters", "set_log_level", "set_num_threads", "set_use_onednn",
           "use_onednn"]

__version__ = _C.version()


def set_log_level(level):
    """The C++ library's log level: "error", "warn" (the default), "info" (every
    compile, trace, capture, re-capture and fallback as it happens) or "debug";
    the environment variable SINKGRAPH_LOG sets the starting level."""
    _C.set_log_level(level)


def set_num_threads(threads):
    """The compute threads sinkgraph's kernels may split their work across,
    the stream's worker included (1 to 1024; the default is the environment
    variable SINKGRAPH_NUM_THREADS, else the cores this process may use).
    Applies from the next kernel that runs, replays included."""
    _C.set_num_threads(int(threads))


def num_threads():
    """The compute thread count set_num_threads sets."""
    return _C.num_threads()


def set_use_onednn(use):
    """Whether convolutions and matrix products of more than 32 rows may run
    through oneDNN where it is faster than sinkgraph's own kernels (on by
    default in a build with oneDNN); False keeps them on sinkgraph's own
    kernels. Applies from the next kernel
    that runs, replays of graphs captured before included. See docs/python.md."""
    _C.set_use_onednn(bool(use))


def use_onednn():
    """The switch set_use_onednn sets (False in a build without oneDNN)."""
    return _C.use_onednn()


def onednn_built():
    """Whether this build of sinkgraph has oneDNN (CMake SINKGRAPH_ONEDNN)."""
    return _C.onednn_built()
