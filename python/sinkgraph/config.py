"""CompilerConfig: the C++ options, with the same names and defaults, as attributes."""

from . import _C


def _typed(text):
    if text in ("true", "false"):
        return text == "true"
    if text == "none":
        return None
    try:
        return int(text)
    except ValueError:
        return text


# Options that exist only on the Python side.
_PYTHON_OPTIONS = {
    # Outputs cross to torch as copies by default: a torch.Tensor viewing the
    # graph's pool could not raise when a later replay overwrites it (as
    # torch.cuda.graphs' static outputs). True: zero-copy views, valid until
    # the next call of the same compiled graph (docs/python.md, traps).
    "output_views": False,
}


# Note [Captures from Python threads]
# The C++ default capture_error_mode is "global", TorchAir's (and CUDA's): while
# any thread captures, an allocation or host read outside the capture on any
# other thread is an error. Under torch.compile every capture is the backend's
# own (a first call, a new shape), made while the module's other callers keep
# running their replays on other threads: a server warming a new batch size
# made another thread's replay fail with that error (four threads calling a
# freshly compiled module at once, python/tests/test_threads.py). No user code
# runs inside these captures, so "global" guards nothing here; the front end
# captures with "thread_local" instead, as torch's own CUDA graph trees do
# (Inductor's reduce-overhead). Setting "global" (or "relaxed") still applies.
_FRONT_END_DEFAULTS = {"capture_error_mode": "thread_local"}


class CompilerConfig:
    """Every sinkgraph compiler option (docs/compiler.md) as an attribute.

    ``config.mode = "reduce-overhead"``; ``config.capture_limit = 4``. An
    unknown name or an invalid value raises at once, naming what is accepted.
    """

    def __init__(self, **options):
        defaults = {name: _typed(text) for name, text in _C.config_options()}
        # C++-only options that take objects, not values.
        defaults.pop("use_graph_pool", None)
        defaults.update(_PYTHON_OPTIONS)
        defaults.update(_FRONT_END_DEFAULTS)
        object.__setattr__(self, "_values", defaults)
        for name, value in options.items():
            setattr(self, name, value)

    @staticmethod
    def option_names():
        return sorted(CompilerConfig()._values)

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"CompilerConfig has no option {name!r}; options: "
                             f"{', '.join(sorted(values))}")

    def __setattr__(self, name, value):
        values = self._values
        if name not in values:
            raise AttributeError(f"CompilerConfig has no option {name!r}; options: "
                                 f"{', '.join(sorted(values))}")
        default = values[name]
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"option {name!r} expects True or False, got {value!r}")
            text = "true" if value else "false"
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"option {name!r} expects an integer, got {value!r}")
            text = str(value)
        else:
            if not isinstance(value, str):
                raise ValueError(f"option {name!r} expects a string, got {value!r}")
            text = value
        if name not in _PYTHON_OPTIONS:
            try:
                _C.check_option(name, text)
            except _C.Error as e:
                raise ValueError(str(e)) from None
        values[name] = value

    def copy(self):
        c = CompilerConfig()
        c._values.update(self._values)
        return c

    def cxx_options(self):
        """(name, text) pairs for the C++ CompilerConfig."""
        out = []
        for name, value in self._values.items():
            if name in _PYTHON_OPTIONS:
                continue
            if isinstance(value, bool):
                text = "true" if value else "false"
            else:
                text = str(value)
            out.append((name, text))
        if not self._values["output_views"]:
            # Outputs are copied inside the replay's own queue entry; torch
            # then receives memory no later replay writes.
            out.append(("clone_output", "true"))
        return out

    def __repr__(self):
        items = ", ".join(f"{k}={v!r}" for k, v in sorted(self._values.items()))
        return f"CompilerConfig({items})"
