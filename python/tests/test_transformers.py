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
