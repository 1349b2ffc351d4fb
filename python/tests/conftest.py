"""Shared pytest fixtures: one compute thread, fixed seeds, the three modes."""

import pytest
import torch

torch.set_num_threads(1)

MODES = ["eager", "reduce-overhead", "max-autotune"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    # Every test starts with Dynamo's caches empty: a frame compiled by an
    # earlier test's backend (whose id a new backend may reuse once the old
    # one is freed) would otherwise serve this test's calls.
    torch._dynamo.reset()


def make_backend(mode, **options):
    import sinkgraph
    config = sinkgraph.CompilerConfig()
    config.mode = mode
    for k, v in options.items():
        setattr(config, k, v)
    return sinkgraph.get_backend(compiler_config=config)


def rss_kib():
    """The process's resident memory (VmRSS), in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")
