"""Hugging Face's Llama math over a converted checkpoint, as an independent
reference for `sinkgraph convert --to hf` (cli_test.sh runs it when torch is
importable).

The forward pass below is transformers' LlamaForCausalLM written out in plain
torch (modeling_llama.py: RMSNorm, rotate_half rotary embedding on the halves
of each head, repeat_kv for grouped-query attention, SwiGLU), reading the
safetensors files and config.json without sinkgraph. Run on stories260K
converted from llama2.c, it must reproduce the llama2.c reference logits: that
checks the q/k row permutation against HF's rotary convention, not against
sinkgraph's own rope kernel.

Usage: hf_reference.py HF_DIR bos_greedy_200.txt bos_logits_64x512.f32
Exits 0 when the 64 reference rows agree within 1e-3 and their argmax ids match.
"""
import json
import os
import struct
import sys

import torch


def load(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index))["weight_map"].values()))
             if os.path.exists(index) else ["model.safetensors"])
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    weights = {}
    for name in files:
        raw = open(os.path.join(folder, name), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        for key, e in json.loads(raw[8:8 + n]).items():
            if key == "__metadata__":
                continue
            begin, end = e["data_offsets"]
            t = torch.frombuffer(bytearray(raw[8 + n + begin:8 + n + end]), dtype=dtypes[e["dtype"]])
            weights[key] = t.reshape(e["shape"]).float()
    return weights


def forward(cfg, w, ids):
    hidden, heads, kv_heads = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = hidden // heads
    eps = cfg["rms_norm_eps"]
    t = len(ids)

    def rms(x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        return torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)

    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.outer(torch.arange(t).float(), inv_freq)
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((t, t), float("-inf")).triu(1)
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(t, heads, d).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(t, kv_heads, d).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(t, kv_heads, d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, 0)
        v = v.repeat_interleave(heads // kv_heads, 0)
        a = torch.softmax(q @ k.transpose(1, 2) / d**0.5 + mask, -1) @ v
        x = x + a.transpose(0, 1).reshape(t, hidden) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return rms(x, w["model.norm.weight"]) @ head.T


def main():
    folder, ids_file, logits_file = sys.argv[1:4]
    cfg = json.load(open(os.path.join(folder, "config.json")))
    assert cfg["model_type"] == "llama" and cfg["hidden_act"] == "silu", cfg
    ids = [1] + [int(x) for x in open(ids_file).read().split()][:63]
    ref = torch.frombuffer(bytearray(open(logits_file, "rb").read()), dtype=torch.float32)
    ref = ref.reshape(64, -1)
    with torch.no_grad():
        logits = forward(cfg, load(folder), ids)
    diff = (logits - ref).abs().max().item()
    same = bool((logits.argmax(-1) == ref.argmax(-1)).all())
    print(f"HF math on the converted checkpoint: max |logit - reference| {diff:.3g}, argmax equal: {same}")
    sys.exit(0 if diff <= 1e-3 and same else 1)


if __name__ == "__main__":
    main()
