"""Copies a GGUF file, adding a tiny SentencePiece-style vocabulary of 64
tokens (ggml's own `gguf` package writes it): cli_test.sh's `--prompt` case.

Usage: gguf_add_vocab.py IN.gguf OUT.gguf   (IN's model has a vocabulary of 64)
"""
import sys
import numpy as np
from gguf import GGUFReader, GGUFWriter
src, dst = sys.argv[1], sys.argv[2]
r = GGUFReader(src)
w = GGUFWriter(dst, "llama")
for k, f in r.fields.items():
    if k.startswith("GGUF.") or k == "general.architecture":
        continue
    w.add_key_value(k, f.contents(), f.types[0], f.types[-1] if len(f.types) > 1 else None)
letters = "abcdefghijklmnopqrstuvwxyz"
pieces = ["<unk>", "<s>", "</s>", "\u2581"] + list(letters) + ["\u2581h", "el", "lo", "\u2581w", "or", "ld", "\u2581t", "he", "\u2581the"]
pieces += [f"x{i}" for i in range(64 - len(pieces))]
w.add_tokenizer_model("llama")
w.add_token_list(pieces)
w.add_token_scores([0.0, 0.0, 0.0] + [-float(i) for i in range(len(pieces) - 3)])
w.add_token_types([2, 3, 3] + [1] * (len(pieces) - 3))
w.add_bos_token_id(1)
w.add_eos_token_id(2)
w.add_unk_token_id(0)
for t in r.tensors:
    w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed([int(x) for x in t.shape])), raw_dtype=t.tensor_type)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
