"""transformers models (small seeded configs, nothing downloaded) under the backend.

Forward outputs of Llama, Qwen2 (attention biases), GPT-2 and BERT equal eager's
with attention masks and padding, in every mode; greedy generate with a static
KV cache gives eager's ids with the decode step captured once and replayed; and
the shipped stories260K, converted to an HF folder by the CLI, gives its 200
reference ids; and the C++ CLI decodes save_pretrained Llama and Qwen2 folders
(f32 and bf16) to the ids transformers gives.
"""
import pytest
import torch

import sinkgraph
from conftest import make_backend

transformers = pytest.importorskip("transformers")

RTOL, ATOL = 1e-3, 1e-4
FLASH = "aten._scaled_dot_product_flash_attention_for_cpu.default"
VOCAB = 128


def _make(name):
    torch.manual_seed(0)
    small = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, max_position_embeddings=128)
    if name == "llama":
        cfg = transformers.LlamaConfig(num_key_value_heads=2, **small)
        return transformers.LlamaForCausalLM(cfg).eval()
    if name == "qwen2":
        # Qwen2 has biases on q, k and v (and none on o): check the config says so.
        cfg = transformers.Qwen2Config(num_key_value_heads=2, **small)
        model = transformers.Qwen2ForCausalLM(cfg).eval()
        assert model.model.layers[0].self_attn.q_proj.bias is not None
        return model
    if name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                      n_positions=128, bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(cfg).eval()
    if name == "bert":
        cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=128,
                                      max_position_embeddings=128)
        return transformers.BertModel(cfg).eval()
    raise AssertionError(name)


def _ids(batch, length, seed=1):
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _padded_batch(name):
    """Two sequences of 10 tokens, the second padded by 3: on the left for the
    decoders (as generate pads), on the right for BERT."""
    ids = _ids(2, 10)
    mask = torch.ones(2, 10, dtype=torch.long)
    if name == "bert":
        mask[1, -3:] = 0
    else:
        mask[1, :3] = 0
    return ids, mask


@pytest.mark.parametrize("mode", ["eager", "reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("name", ["llama", "qwen2", "gpt2", "bert"])
def test_forward_with_an_attention_mask_equals_eager(name, mode):
    torch._dynamo.reset()
    model = _make(name)
    ids, mask = _padded_batch(name)
    backend = make_backend(mode)
    compiled = torch.compile(model, backend=backend)
    key = "last_hidden_state" if name == "bert" else "logits"
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask)[key]
        for _ in range(2):
            got = compiled(input_ids=ids, attention_mask=mask)[key]
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
        # No mask at all: another Dynamo graph, the same answers.
        torch.testing.assert_close(compiled(input_ids=ids)[key], model(input_ids=ids)[key],
                                   rtol=RTOL, atol=ATOL)
    fallback = {target for g in backend.compiled for _, _, target in g.fallback}
    assert FLASH not in fallback, sinkgraph.explain(backend)  # the masked attention is ours
    assert "aten.mm.default" not in fallback and "aten.addmm.default" not in fallback
    if mode == "reduce-overhead":
        c = sinkgraph.counters(backend)
        assert c["captured"] >= 1 and c["replayed"] >= c["captured"], c


def _dynamo_graphs():
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def _graph_counts():
    from sinkgraph.backend import all_backends
    return {id(b): len(b.compiled) for b in all_backends()}


def _regions_since(counts):
    """The regions of the graphs compiled since _graph_counts() returned `counts`."""
    from sinkgraph.backend import all_backends
    return [r for b in all_backends() for g in b.compiled[counts.get(id(b), 0):]
            for r in g.regions]


def _kv_head_copies(region):
    """How many contiguous copies of a 5-D expand (repeat_kv's head broadcast)
    the region's compiled graphs still hold (Note [Grouped heads read in place])."""
    import re
    copies = 0
    for i in range(region.graph.num_graphs()):
        defs = {}
        for line in region.graph.graph_text(i).splitlines():
            m = re.match(r"\s*(%\w+) = (\w+)\((%\w+)?.*: \w+\[([^\]]*)\]", line)
            if not m:
                continue
            defs[m.group(1)] = (m.group(2), m.group(4).count(",") + 1)
            if m.group(2) == "contiguous" and defs.get(m.group(3)) == ("expand", 5):
                copies += 1
    return copies


@pytest.mark.parametrize("how", ["by-name", "get_backend", "max-autotune"])
@pytest.mark.parametrize("name", ["llama", "qwen2", "gpt2"])
def test_static_cache_generate_gives_eager_ids(name, how):
    """64 greedy tokens give eager's ids. Within a generate every region is
    captured once and replayed at every later step, the KV cache written in
    place; prefill and decode are Dynamo's only graphs. A StaticCache the caller
    keeps (and resets) is replayed by later generate calls with no capture."""
    torch._dynamo.reset()
    model = _make(name)
    ids = _ids(1, 8)
    kwargs = dict(max_new_tokens=64, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        ref = model.generate(ids, cache_implementation="static", **kwargs)
        sinkgraph.reset_counters()
        counts = _graph_counts()
        graphs_before = _dynamo_graphs()
        if how == "by-name":
            model.forward = torch.compile(model.forward, backend="sinkgraph",
                                          mode="reduce-overhead")
        else:
            mode = "max-autotune" if how == "max-autotune" else "reduce-overhead"
            model.forward = torch.compile(model.forward, backend=make_backend(mode))
        out = model.generate(ids, cache_implementation="static", **kwargs)
        assert torch.equal(out, ref)
        first = sinkgraph.counters()
        assert _dynamo_graphs() - graphs_before == 2, sinkgraph.explain()  # prefill, decode
        assert first["graphs_compiled"] == 2
        regions = _regions_since(counts)
        assert regions and all(r.counters()["captured"] == 1 for r in regions), \
            sinkgraph.explain()
        assert first["replayed"] >= 63, first  # every decode step after the first
        # Llama's and Qwen2's 2 kv heads serve 4 query heads: the attention reads
        # them in place, no copy of the cache per layer and step.
        assert sum(_kv_head_copies(r) for r in regions) == 0, sinkgraph.explain()

        # The caller's own cache, as long as generate's (prompt + new tokens -
        # 1: the decode graph's shapes): a new address set, captured on its
        # first use; its first reuse costs Dynamo one prefill graph
        # (transformers' cache guards on its own initialization), and every
        # later use replays.
        cache = transformers.StaticCache(config=model.config, max_cache_len=ids.shape[1] + 63)
        for _ in range(2):
            assert torch.equal(model.generate(ids, cache=cache, **kwargs), ref)
            cache.reset()
        second = sinkgraph.counters()
        assert torch.equal(model.generate(ids, cache=cache, **kwargs), ref)
        third = sinkgraph.counters()
    assert third["captured"] == second["captured"], sinkgraph.explain()
    assert third["replayed"] - second["replayed"] >= 64, (second, third)
    assert third["eager_fallback_due_to_capture_limit"] == 0
    assert not any(third[k] for k in third if k.startswith("recapture_due_to_param")), third


ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stories260k_hf(tmp_path_factory):
    """The shipped stories260K, converted to a Hugging Face Llama folder by the CLI."""
    import subprocess
    out = tmp_path_factory.mktemp("stories260K-hf")
    cli = ROOT / "build" / "release" / "tools" / "sinkgraph"
    subprocess.run([str(cli), "convert", "--from", "llama2c", "--to", "hf",
                    str(ROOT / "models" / "stories260K" / "stories260K.bin"), str(out)],
                   check=True, capture_output=True)
    return out


@pytest.mark.parametrize("mode", [None, "reduce-overhead", "max-autotune"])
def test_stories260k_through_transformers_gives_the_reference_ids(stories260k_hf, mode):
    ref = [int(t) for t in (ROOT / "models" / "stories260K" / "bos_greedy_200.txt").read_text().split()]
    torch._dynamo.reset()
    model = transformers.LlamaForCausalLM.from_pretrained(stories260k_hf).eval()
    if mode is not None:
        backend = make_backend(mode)
        model.forward = torch.compile(model.forward, backend=backend)
    with torch.no_grad():
        out = model.generate(torch.tensor([[1]]), max_new_tokens=200, do_sample=False,
                             cache_implementation="static", eos_token_id=None, pad_token_id=0)
    assert out[0, 1:].tolist() == ref
    if mode is not None:
        c = sinkgraph.counters(backend)
        assert c["captured"] >= 1 and c["replayed"] >= 199, c


def _cli_ids(folder, prompt, steps, mode):
    import subprocess
    cli = ROOT / "build" / "release" / "tools" / "sinkgraph"
    out = subprocess.run([str(cli), "generate", "--model", str(folder), "--steps", str(steps),
                          "--prompt-ids", " ".join(map(str, prompt)), "--mode", mode,
                          "--print-ids"], capture_output=True, text=True)
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_a_save_pretrained_folder_gives_transformers_ids_in_the_cli(tmp_path, name, dtype):
    """One checkpoint, both front ends: the C++ CLI reads the folder that
    transformers wrote (grouped-query heads; Qwen2's q/k/v biases; f32 or
    bf16 weights) and decodes its ids in every mode. The C++ model computes in
    f32 whatever the checkpoint stores, so the reference is transformers
    running the same folder's weights in f32."""
    import json
    from safetensors import safe_open
    _make(name).to(getattr(torch, dtype)).save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        stored = {f.get_slice(k).get_dtype() for k in f.keys()}
        assert (name == "qwen2") == ("model.layers.0.self_attn.q_proj.bias" in f.keys())
    assert stored == {"F32" if dtype == "float32" else "BF16"}, stored
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == name
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    prompt = _ids(1, 6)
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=20, do_sample=False,
                              cache_implementation="static", pad_token_id=0,
                              eos_token_id=None)[0, 6:].tolist()
    for mode in ["eager", "reduce-overhead", "max-autotune"]:
        out = _cli_ids(tmp_path, prompt[0].tolist(), 20, mode)
        assert out.returncode == 0, (mode, out.stderr)
        got = [int(t) for t in out.stdout.splitlines()[0].split(":", 1)[1].split()]
        assert got == want, mode


def test_a_qwen2_folder_with_a_sliding_window_is_refused_by_the_cli_with_one_line(tmp_path):
    """sinkgraph's attention sees the whole cache: a Qwen2 model whose layers
    attend over a sliding window is refused, naming the key, never run with
    an approximation."""
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=128,
                                   use_sliding_window=True, sliding_window=4, max_window_layers=1)
    transformers.Qwen2ForCausalLM(cfg).save_pretrained(tmp_path)
    out = _cli_ids(tmp_path, [1, 2, 3], 4, "eager")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "sliding" in out.stderr and "config.json" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
