#!/usr/bin/env python3
"""What quantized weights and 8-bit activation blocks cost in accuracy
(docs/model.md, "Quantized weights").

stories260K is fed its 200 reference ids (teacher-forced, so every model sees
the same tokens) as f32, with its Q8_0/Q4_0 weights dequantized to f32 (f32
activations), and with the blocks in place (linear_q's 8-bit activation
blocks, Note [Activations quantized per block]). Prints the largest logit
difference over all positions as a fraction of the largest f32 logit, and
how often the top-1 id is the f32 model's.

  .venv/bin/python bench/quant_accuracy.py
"""
import os
import pathlib
import tempfile

import numpy as np

import sinkgraph

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL = os.path.join(ROOT, "models", "stories260K", "stories260K.bin")


def logits(path, prompt):
    out = sinkgraph.Generator(str(path), mode="eager").generate(prompt, max_new_tokens=1,
                                                                keep_logits=True)
    return out.logits[:len(prompt)]


def main():
    with open(os.path.join(ROOT, "models", "stories260K", "bos_greedy_200.txt")) as f:
        ids = [int(t) for t in f.read().split()]
    prompt = [1] + ids[:-1]
    f32 = logits(MODEL, prompt)
    scale = float(np.abs(f32).max())
    top = f32.argmax(1)
    work = pathlib.Path(tempfile.mkdtemp())
    for q in ["q8_0", "q4_0"]:
        blocks = work / f"{q}.gguf"
        sinkgraph.convert_checkpoint(MODEL, blocks, "gguf", q)
        dequantized = work / f"{q}_dequantized.safetensors"
        sinkgraph.convert_checkpoint(blocks, dequantized, "safetensors", "f32")
        a = logits(dequantized, prompt)  # the weights rounded, f32 activations
        b = logits(blocks, prompt)       # blocks in place, 8-bit activation blocks
        for name, x in [("dequantized weights, f32 activations", a),
                        ("blocks, 8-bit activation blocks", b)]:
            print(f"{q} {name}: max |difference| {np.abs(x - f32).max() / scale:.3f} of the "
                  f"largest f32 logit, top-1 = f32's {int((x.argmax(1) == top).sum())}/{len(top)}")
        print(f"{q} the activations alone (against the dequantized weights): "
              f"{np.abs(b - a).max() / scale:.3f}, top-1 the same "
              f"{int((a.argmax(1) == b.argmax(1)).sum())}/{len(top)}")


if __name__ == "__main__":
    main()
