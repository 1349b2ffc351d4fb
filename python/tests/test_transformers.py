"""A transformers LlamaForCausalLM (small, seeded, nothing downloaded) under the backend:
greedy generate with a static KV cache gives eager's ids."""
import pytest
import torch

import sinkgraph
from conftest import make_backend

transformers = pytest.importorskip("transformers")


def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_static_cache_generate_gives_eager_ids(mode):
    torch._dynamo.reset()
    model = _llama()
    ids = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(1))
    kwargs = dict(max_new_tokens=16, do_sample=False, cache_implementation="static")
    with torch.no_grad():
        ref = model.generate(ids, **kwargs)
        backend = make_backend(mode)
        model.forward = torch.compile(model.forward, backend=backend)
        out = model.generate(ids, **kwargs)
    assert torch.equal(out, ref)
    c = sinkgraph.counters(backend)
    assert c["captured"] >= 1 and c["replayed"] >= 15, c


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
