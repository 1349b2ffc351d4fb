#!/usr/bin/env python3
"""Decode tokens/s with f32, Q8_0 and Q4_0 weights, interleaved, and llama.cpp
on the same files (docs/performance.md, "Quantized weights").

The model is first written as one GGUF file per type (`sinkgraph convert --to
gguf --dtype f32|q8_0|q4_0`: the blocks `--quantize` makes). Each round then
runs, per (thread count, type), `sinkgraph generate --model FILE.gguf --stats`
and, with --llama-cpp-python, llama.cpp on the same file
(bench/llama_cpp_decode.py, in the venv that holds llama-cpp-python: its
decode time as llama.cpp counts it). Prints, per thread count and type, each
engine's median decode tokens/s (min-max over rounds), sinkgraph's ratio to
its own f32 and to llama.cpp within the same rounds, and how many of the
greedy ids the two engines agree on.

  .venv/bin/python bench/quant_decode.py --model /tmp/m11 --steps 32 --rounds 3 \\
      --threads 1,2 --llama-cpp-python /work/llvenv/bin/python

llama.cpp needs a vocabulary in the file, which our checkpoints do not carry:
its copy of each file gets a stand-in one (specials, the 256 byte tokens,
placeholders; ggml's `gguf` package from .venv writes it). Decoding from BOS
by ids never reads it. Measure on a quiet machine.
"""
import argparse
import json
import os
import statistics
import subprocess

TYPES = ["f32", "q8_0", "q4_0"]
HERE = os.path.dirname(os.path.abspath(__file__))


def convert(cli, model, fmt, qtype, out):
    if not os.path.exists(out):
        subprocess.run([cli, "convert", "--from", fmt, "--to", "gguf", "--dtype", qtype, model,
                        out], check=True, capture_output=True)
    return out


def with_stand_in_vocab(src, dst):
    """A copy of src with a SentencePiece-style vocabulary of the model's size."""
    if os.path.exists(dst):
        return dst
    import numpy as np
    from gguf import GGUFReader, GGUFWriter
    r = GGUFReader(src)
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    n_vocab = int(emb.shape[1])
    w = GGUFWriter(dst, "llama")
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k.startswith("tokenizer."):
            continue
        w.add_key_value(k, f.contents(), f.types[0], f.types[-1] if len(f.types) > 1 else None)
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces += [f"x{i}" for i in range(n_vocab - len(pieces))]
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def ours(cli, model, threads, steps, mode):
    out = subprocess.run([cli, "generate", "--model", model, "--steps", str(steps), "--threads",
                          str(threads), "--mode", mode, "--stats", "--print-ids"],
                         check=True, capture_output=True, text=True).stdout.strip().splitlines()
    ids = [int(x) for x in out[0].split()[1:]]  # "ids: 461 461 ..."
    return json.loads(out[-1])["decode_tokens_per_s"], ids


def llama_cpp(python, model, threads, steps):
    out = subprocess.run([python, os.path.join(HERE, "llama_cpp_decode.py"), "--model", model,
                          "--threads", str(threads), "--steps", str(steps)],
                         check=True, capture_output=True, text=True).stdout
    d = json.loads(out.strip().splitlines()[-1])
    return d["decode_tokens_per_s"], d["ids"]


def spread(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"


def ratio(v):
    return f"{statistics.median(v):.2f}× ({min(v):.2f}-{max(v):.2f})"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cli", default=os.path.join(HERE, "..", "build", "release", "tools",
                                                 "sinkgraph"))
    p.add_argument("--model", required=True)
    p.add_argument("--from", dest="fmt", default="safetensors",
                   help="the model's format, as `sinkgraph convert --from` takes it")
    p.add_argument("--work", default="/tmp/sg-quant-decode",
                   help="where the GGUF files are written (kept for the next run)")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--mode", default="reduce-overhead")
    p.add_argument("--llama-cpp-python", default=None,
                   help="the python of a venv holding llama-cpp-python: adds llama.cpp's column")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    os.makedirs(a.work, exist_ok=True)
    name = os.path.basename(os.path.normpath(a.model))
    files = {}
    for q in TYPES:
        path = convert(a.cli, a.model, a.fmt, q, os.path.join(a.work, f"{name}-{q}.gguf"))
        if a.llama_cpp_python:  # both engines read the same file
            path = with_stand_in_vocab(path, os.path.join(a.work, f"{name}-{q}-vocab.gguf"))
        files[q] = path
    tps = {(e, t, q): [] for e in ("sg", "lc") for t in threads for q in TYPES}
    agree = {(t, q): [] for t in threads for q in TYPES}
    for r in range(a.rounds):
        line = []
        for t in threads:
            for q in TYPES:
                v, ids = ours(a.cli, files[q], t, a.steps, a.mode)
                tps[("sg", t, q)].append(v)
                line.append(f"{t}t {q} {v:.2f}")
                if a.llama_cpp_python:
                    v, lc_ids = llama_cpp(a.llama_cpp_python, files[q], t, a.steps)
                    tps[("lc", t, q)].append(v)
                    agree[(t, q)].append(sum(x == y for x, y in zip(ids, lc_ids)))
                    line.append(f"llama.cpp {v:.2f}")
        print(f"round {r + 1}: " + ", ".join(line), flush=True)
    print(f"\n{a.model}, sinkgraph {a.mode}, {a.steps} steps, {a.rounds} rounds\n")
    lc = bool(a.llama_cpp_python)
    print("| threads | type | sinkgraph tokens/s | ÷ f32 |" +
          (" llama.cpp tokens/s | sinkgraph ÷ llama.cpp | ids agreeing |" if lc else ""))
    print("| --- | --- | --- | --- |" + (" --- | --- | --- |" if lc else ""))
    for t in threads:
        for q in TYPES:
            v = tps[("sg", t, q)]
            row = f"| {t} | {q} | {spread(v)} | {ratio([x / f for x, f in zip(v, tps[('sg', t, 'f32')])])} |"
            if lc:
                w = tps[("lc", t, q)]
                row += (f" {spread(w)} | {ratio([x / y for x, y in zip(v, w)])} |"
                        f" {min(agree[(t, q)])} of {a.steps} |")
            print(row)


if __name__ == "__main__":
    main()
