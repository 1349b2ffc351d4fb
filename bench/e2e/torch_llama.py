#!/usr/bin/python3
"""PyTorch eager implementation of sinkgraph's Llama model, for bench/e2e.

Plain torch ops, one token per step, torch.no_grad(), one thread: the
"(e) PyTorch eager" column of the end-to-end benchmark. Semantics follow
src/models/llama.cpp (RMSNorm with weight and norm_eps, grouped-query
attention, RoPE interleaved or half with freq = 1 / theta^(2i/D) in f32,
SwiGLU, shared or separate classifier); see docs/model.md.

Usage:
  torch_llama.py MODEL --steps N [--teacher-forced-ids "1 2 3"] --json OUT.json

MODEL is a llama2.c .bin (version 0), a .safetensors file with config.json
beside it, or a folder holding model.safetensors and config.json.

Greedy mode (default): feeds BOS (id 1) at position 0 and then each step's
argmax; ids[k] is the argmax of the logits at position k.
Teacher-forced mode: feeds BOS at position 0 and id p-1 of the given list at
position p (as ../shared/models/stories260K/bos_logits_64x512.f32 was made),
so the list needs at least N-1 ids; ids[k] is still the argmax at position k,
and "logits" holds one row per fed position.

Each step (forward + argmax) is timed with time.perf_counter. The JSON holds
{"ids", "step_us", "us_per_token_median", "tokens_per_s", "logits" (only in
teacher-forced mode)}; tokens_per_s = 1e6 / us_per_token_median.

Needs python3-torch (Debian); without it the script says so and exits 3.
"""

import argparse
import json
import os
import statistics
import struct
import sys
import time

try:
    import torch
except ImportError:  # torch is optional for the benchmark: say so and stop.
    torch = None

BOS = 1


# ---- checkpoints -----------------------------------------------------------


def _f32(buf, offset, count):
    """count little-endian f32 values of buf at byte offset, as a torch tensor."""
    return torch.frombuffer(buf, dtype=torch.float32, count=count, offset=offset).clone()


def load_llama2c(path):
    """A llama2.c version-0 checkpoint (docs/model.md, checkpoint_llama2c.cpp)."""
    with open(path, "rb") as f:
        buf = bytearray(f.read())
    if len(buf) < 28:
        raise ValueError(f"{path}: too short for the llama2.c header")
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack_from("<7i", buf, 0)
    shared = vocab > 0
    vocab = abs(vocab)
    cfg = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads,
               n_kv_heads=n_kv_heads, vocab_size=vocab, max_seq_len=seq_len, norm_eps=1e-5,
               rope_theta=10000.0, rope_style="interleaved")
    head = dim // n_heads
    kv_dim = head * n_kv_heads
    off = 28

    def take(*shape):
        nonlocal off
        n = 1
        for s in shape:
            n *= s
        if off + 4 * n > len(buf):
            raise ValueError(f"{path}: file too short for a tensor of shape {shape} at {off}")
        t = _f32(buf, off, n).view(*shape)
        off += 4 * n
        return t

    w = {"tok_embeddings": take(vocab, dim)}
    stacked = {}
    for name, shape in (("attention_norm", (dim,)), ("wq", (dim, dim)), ("wk", (kv_dim, dim)),
                        ("wv", (kv_dim, dim)), ("wo", (dim, dim)), ("ffn_norm", (dim,)),
                        ("w1", (hidden, dim)), ("w2", (dim, hidden)), ("w3", (hidden, dim))):
        stacked[name] = take(n_layers, *shape)
    w["layers"] = [{k: v[l] for k, v in stacked.items()} for l in range(n_layers)]
    w["norm"] = take(dim)
    take(seq_len, head // 2)  # freq_cis_real (unused: RoPE is computed)
    take(seq_len, head // 2)  # freq_cis_imag
    w["output"] = w["tok_embeddings"] if shared else take(vocab, dim)
    if off != len(buf):
        raise ValueError(f"{path}: {len(buf) - off} trailing bytes after the last tensor")
    return cfg, w


def load_safetensors(path, config_path):
    """model.safetensors (header parsed by hand) plus config.json (docs/model.md)."""
    with open(config_path) as f:
        j = json.load(f)
    cfg = {k: int(j[k]) for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                  "vocab_size", "max_seq_len")}
    cfg["norm_eps"] = float(j.get("norm_eps", 1e-5))
    cfg["rope_theta"] = float(j.get("rope_theta", 10000.0))
    cfg["rope_style"] = j.get("rope_style", "interleaved")
    if cfg["rope_style"] not in ("interleaved", "half"):
        raise ValueError(f"{config_path}: unknown rope_style {cfg['rope_style']!r}")
    with open(path, "rb") as f:
        buf = bytearray(f.read())
    (n,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    base = 8 + n
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] not in dtypes:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {e['dtype']}")
        dt = dtypes[e["dtype"]]
        begin, end = e["data_offsets"]
        count = (end - begin) // (4 if dt == torch.float32 else 2)
        t = torch.frombuffer(buf, dtype=dt, count=count, offset=base + begin)
        tensors[name] = t.to(torch.float32).reshape(e["shape"]).clone()
    L = cfg["n_layers"]
    w = {"tok_embeddings": tensors["tok_embeddings.weight"], "norm": tensors["norm.weight"]}
    w["output"] = tensors.get("output.weight", w["tok_embeddings"])
    names = {"attention_norm": "attention_norm.weight", "wq": "attention.wq.weight",
             "wk": "attention.wk.weight", "wv": "attention.wv.weight",
             "wo": "attention.wo.weight", "ffn_norm": "ffn_norm.weight",
             "w1": "feed_forward.w1.weight", "w2": "feed_forward.w2.weight",
             "w3": "feed_forward.w3.weight"}
    w["layers"] = [{k: tensors[f"layers.{l}.{v}"] for k, v in names.items()} for l in range(L)]
    return cfg, w


def load_model(path):
    """As sinkgraph's load_model: a folder, a .safetensors file, else llama2.c."""
    if os.path.isdir(path):
        return load_safetensors(os.path.join(path, "model.safetensors"),
                                os.path.join(path, "config.json"))
    if path.endswith(".safetensors"):
        return load_safetensors(path, os.path.join(os.path.dirname(path) or ".", "config.json"))
    return load_llama2c(path)


# ---- the model -------------------------------------------------------------


class TorchLlama:
    """One-token-at-a-time decoder with its own KV cache [L, seq_len, n_kv_heads, D]."""

    def __init__(self, cfg, weights):
        self.cfg = cfg
        self.w = weights
        self.dim = cfg["dim"]
        self.n_heads = cfg["n_heads"]
        self.n_kv_heads = cfg["n_kv_heads"]
        self.head = self.dim // self.n_heads
        self.group = self.n_heads // self.n_kv_heads
        self.eps = cfg["norm_eps"]
        self.half = cfg["rope_style"] == "half"
        self.scale = 1.0 / (self.head ** 0.5)
        seq = cfg["max_seq_len"]
        # RoPE tables as the rope kernel: freq = 1 / theta^(2i/D), angle = pos * freq, in f32.
        theta = torch.tensor(cfg["rope_theta"], dtype=torch.float32)
        expo = torch.arange(0, self.head, 2, dtype=torch.float32) / float(self.head)
        freq = 1.0 / torch.pow(theta, expo)
        angle = torch.arange(seq, dtype=torch.float32)[:, None] * freq[None, :]
        self.cos = torch.cos(angle)  # [seq, D/2]
        self.sin = torch.sin(angle)
        self.k_cache = torch.zeros(cfg["n_layers"], seq, self.n_kv_heads, self.head)
        self.v_cache = torch.zeros_like(self.k_cache)

    def reset(self):
        self.k_cache.zero_()
        self.v_cache.zero_()

    def rmsnorm(self, x, weight):
        return weight * (x * torch.rsqrt(torch.mean(x * x) + self.eps))

    def rope(self, x, pos):
        """x: [heads, D] rotated by the angles of position pos."""
        c, s = self.cos[pos], self.sin[pos]
        if self.half:
            a, b = x[:, : self.head // 2], x[:, self.head // 2:]
            return torch.cat((a * c - b * s, a * s + b * c), dim=-1)
        pairs = x.view(x.shape[0], self.head // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        return torch.stack((a * c - b * s, a * s + b * c), dim=-1).view(x.shape[0], self.head)

    def forward(self, token, pos):
        """Logits [vocab] for `token` at position `pos`; appends K/V to the cache."""
        x = self.w["tok_embeddings"][token]
        for l, lw in enumerate(self.w["layers"]):
            h = self.rmsnorm(x, lw["attention_norm"])
            q = torch.mv(lw["wq"], h).view(self.n_heads, self.head)
            k = torch.mv(lw["wk"], h).view(self.n_kv_heads, self.head)
            v = torch.mv(lw["wv"], h).view(self.n_kv_heads, self.head)
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            self.k_cache[l, pos] = k
            self.v_cache[l, pos] = v
            keys = self.k_cache[l, : pos + 1].permute(1, 2, 0)  # [Hkv, D, T]
            values = self.v_cache[l, : pos + 1].transpose(0, 1)  # [Hkv, T, D]
            # Query head h reads kv head h // group: view q as [Hkv, group, D].
            qg = q.view(self.n_kv_heads, self.group, self.head)
            att = torch.softmax(torch.matmul(qg, keys) * self.scale, dim=-1)  # [Hkv, group, T]
            out = torch.matmul(att, values).reshape(self.dim)
            x = x + torch.mv(lw["wo"], out)
            h = self.rmsnorm(x, lw["ffn_norm"])
            gate = torch.nn.functional.silu(torch.mv(lw["w1"], h)) * torch.mv(lw["w3"], h)
            x = x + torch.mv(lw["w2"], gate)
        x = self.rmsnorm(x, self.w["norm"])
        return torch.mv(self.w["output"], x)


# ---- the run ---------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--teacher-forced-ids", default=None,
                    help="ids fed at positions 1..N-1 (BOS at 0), space-separated")
    ap.add_argument("--json", required=True, help="output JSON file")
    args = ap.parse_args(argv)
    if torch is None:
        print("torch_llama.py: PyTorch is not installed (apt-get install python3-torch)",
              file=sys.stderr)
        return 3
    torch.set_num_threads(1)

    cfg, weights = load_model(args.model)
    if not 1 <= args.steps <= cfg["max_seq_len"]:
        print(f"torch_llama.py: --steps {args.steps} must be in [1, {cfg['max_seq_len']}]",
              file=sys.stderr)
        return 2
    forced = None
    if args.teacher_forced_ids is not None:
        forced = [int(t) for t in args.teacher_forced_ids.split()]
        if len(forced) < args.steps - 1:
            print(f"torch_llama.py: --teacher-forced-ids has {len(forced)} ids; "
                  f"{args.steps} steps need {args.steps - 1}", file=sys.stderr)
            return 2
    model = TorchLlama(cfg, weights)

    ids, step_us, logits_rows = [], [], []
    with torch.no_grad():
        token = BOS
        for pos in range(args.steps):
            t0 = time.perf_counter()
            logits = model.forward(token, pos)
            nxt = int(torch.argmax(logits).item())
            t1 = time.perf_counter()
            step_us.append((t1 - t0) * 1e6)
            ids.append(nxt)
            if forced is not None:
                logits_rows.append(logits.tolist())
                token = forced[pos] if pos < len(forced) else nxt
            else:
                token = nxt

    median = statistics.median(step_us)
    out = {"ids": ids, "step_us": step_us, "us_per_token_median": median,
           "tokens_per_s": 1e6 / median}
    if forced is not None:
        out["logits"] = logits_rows
    with open(args.json, "w") as f:
        json.dump(out, f)
    print(f"torch eager: {len(ids)} steps, {median:.1f} us/token (median), "
          f"{1e6 / median:.0f} tokens/s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
