"""Token generation with sinkgraph's own Llama model: what `sinkgraph generate` runs.

    gen = sinkgraph.Generator("stories260K.bin", mode="reduce-overhead")
    out = gen.generate([1], max_new_tokens=64)           # one prompt
    out.ids, out.stats["decode_tokens_per_s"]
    out = gen.generate([[1, 2], [1]], max_new_tokens=8)  # many, decoded together
    out.ids                                              # one list per prompt

    sinkgraph.generate([1], model="builtin", max_new_tokens=16).ids   # one call

The C++ Generator (include/sinkgraph/generate.h) compiles the model once and
keeps its graphs and KV caches for every later call; calls from several
threads run one at a time. No torch is involved: token ids are plain ints.
See docs/python.md, "Generating tokens".
"""

import json
import os
from dataclasses import dataclass, field

from . import _C

__all__ = ["GenerationResult", "Generator", "convert_checkpoint", "default_model", "generate"]


@dataclass
class GenerationResult:
    """ids: the generated ids (a list of ints for one prompt, a list of lists
    for many, in input order; prompts excluded). stats: the `generate --stats`
    object (decode_tokens_per_s, captured, replayed, ...). explain: the
    compiled functions' report ("" in eager mode). logits: with keep_logits, a
    float32 numpy array [prompt + new - 1, vocab] of every row the model
    computed (row i predicts token i + 1); else None."""
    ids: list
    stats: dict = field(default_factory=dict)
    explain: str = ""
    logits: object = None


def default_model():
    """The stories260K checkpoint shipped with sinkgraph (the CLI's default),
    or None when this install has none."""
    here = os.path.dirname(os.path.abspath(__file__))
    for share in (os.path.join(here, "share"),                   # a pip install
                  os.path.join(here, os.pardir, os.pardir, "share")):  # build/<preset>/python
        path = os.path.join(share, "sinkgraph", "stories260K", "stories260K.bin")
        if os.path.exists(path):
            return os.path.normpath(path)
    return None


def _is_batch(prompt):
    """Whether `prompt` holds prompts (a list of lists, a 2-D array or tensor)
    rather than ids (a list of ints, a 1-D array or tensor)."""
    if isinstance(prompt, (str, bytes)):
        raise TypeError("generate: a prompt is a list of token ids, not text")
    prompt = list(prompt)
    if not prompt:
        return False
    try:
        len(prompt[0])      # a row; an int, a numpy scalar or a 0-d tensor has no length
    except TypeError:
        return False
    return True


class Generator:
    """A Llama model compiled for generation, kept across calls.

    model: a checkpoint path as `sinkgraph generate --model` takes it
    (llama2.c .bin, .safetensors, our folder or a Hugging Face Llama/Qwen2
    folder), "builtin" (the random built-in model), or None for the shipped
    stories260K. mode: "eager", "reduce-overhead" or "max-autotune".
    max_batch, capture_sizes, graph_memory_budget: as the CLI's flags of the
    same names, for calls with many prompts."""

    def __init__(self, model=None, mode="reduce-overhead", *, max_batch=16, capture_sizes=None,
                 graph_memory_budget=0, quantize=None):
        if model is None:
            model = default_model()
            if model is None:
                raise _C.Error("Generator: this install ships no default model; pass model=PATH "
                               "or model=\"builtin\"")
        self._gen = _C.Generator(os.fspath(model), mode, int(max_batch),
                                 [int(s) for s in (capture_sizes or [])],
                                 int(graph_memory_budget), str(quantize or ""))
        self.model = os.fspath(model)

    @property
    def mode(self):
        return self._gen.mode()

    @property
    def model_config(self):
        """The model's configuration, as one line of text."""
        return self._gen.model_config()

    def generate(self, prompt, max_new_tokens=128, *, temperature=0.0, seed=0, stop_ids=(),
                 on_token=None, keep_logits=False):
        """Generates up to max_new_tokens ids after `prompt` (a list of ids, or
        a list of such lists to decode together), fewer when an id of stop_ids
        is generated (it is included). temperature 0 is greedy; above 0 samples
        with `seed` (a prompt's ids do not depend on the others in its batch).
        on_token(id), or on_token(prompt_index, id) for many prompts, is called
        with each id as it is produced; an exception it raises ends the call.
        keep_logits (one prompt only) returns every computed row of logits."""
        stop = [int(s) for s in stop_ids]
        if _is_batch(prompt):
            if keep_logits:
                raise ValueError("keep_logits is for one prompt, not a batch")
            prompts = [[int(t) for t in p] for p in prompt]
            ids, stats, explain = self._gen.generate_batch(
                prompts, int(max_new_tokens), float(temperature), int(seed), stop, on_token)
        else:
            ids, stats, explain, logits = self._gen.generate(
                [int(t) for t in prompt], int(max_new_tokens), float(temperature), int(seed), stop,
                on_token, bool(keep_logits))
            return GenerationResult(ids=ids, stats=json.loads(stats), explain=explain,
                                    logits=logits)
        return GenerationResult(ids=ids, stats=json.loads(stats), explain=explain)

    def __repr__(self):
        return f"sinkgraph.Generator({self.model!r}, mode={self.mode!r})"


def generate(prompt, model=None, mode="reduce-overhead", max_new_tokens=128, **kwargs):
    """One call on a fresh Generator(model, mode): see Generator.generate."""
    gen_keys = ("max_batch", "capture_sizes", "graph_memory_budget", "quantize")
    gen_args = {k: kwargs.pop(k) for k in gen_keys if k in kwargs}
    return Generator(model, mode, **gen_args).generate(prompt, max_new_tokens, **kwargs)


def convert_checkpoint(src, dst, format="gguf", dtype="f32"):
    """Writes the checkpoint at `src` (any format load_model reads: llama2.c,
    safetensors, a Hugging Face folder, GGUF) as `format` ("gguf",
    "safetensors", "hf" or "llama2c") at `dst`, weights in `dtype` ("f32",
    "f16", "bf16"; GGUF also "q8_0" and "q4_0"). What `sinkgraph convert`
    does; docs/model.md."""
    _C.convert_checkpoint(os.fspath(src), os.fspath(dst), str(format), str(dtype))
