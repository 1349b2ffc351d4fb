"""The package: its version, the extension's link line, the log level."""
import importlib.metadata
import pathlib
import re
import subprocess

import pytest
import torch

import sinkgraph

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_is_the_headers_and_the_metadata():
    text = (ROOT / "include" / "sinkgraph" / "version.h").read_text()
    parts = [re.search(rf"#define SINKGRAPH_VERSION_{p} (\d+)", text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    assert sinkgraph.__version__ == ".".join(parts)
    # The venv's installed copy (README command 1 / scripts/build.sh).
    assert importlib.metadata.version("sinkgraph") == sinkgraph.__version__


def test_the_extension_does_not_link_libtorch():
    out = subprocess.run(["readelf", "-d", sinkgraph._C.__file__], capture_output=True,
                         text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", out)
    assert any(n.startswith("libsinkgraph") for n in needed), needed
    assert not [n for n in needed if "torch" in n or "c10" in n], needed


def test_log_level_info_reports_compiles_and_captures(capfd):
    config = sinkgraph.CompilerConfig()
    config.mode = "reduce-overhead"
    model = torch.nn.Linear(8, 8).eval()
    opt = torch.compile(model, backend=sinkgraph.get_backend(compiler_config=config))
    saved = sinkgraph._C.log_level()
    sinkgraph.set_log_level("info")
    try:
        with torch.no_grad():
            opt(torch.randn(2, 8))
            opt(torch.randn(2, 8))
    finally:
        sinkgraph.set_log_level(saved)
    err = capfd.readouterr().err
    assert re.search(r"sinkgraph: info: graph @g\d+ \(inference\) compiled: first compile of "
                     r"Dynamo frame \d+; \d+ ATen nodes", err), err
    assert re.search(r"sinkgraph: info: graph @\S+: call 1: capture: first call", err), err
    assert "call 2" not in err, "a replay is not an event"


def test_bad_log_level_is_an_error():
    with pytest.raises(sinkgraph.Error, match="error, warn, info or debug"):
        sinkgraph.set_log_level("chatty")


def test_a_dlpack_view_of_a_queued_result_waits_for_it():
    # _C.op queues its kernel on the current stream; handing its output to
    # torch must wait for it, as a host read does. A large product keeps the
    # kernel running while the view is made (without the wait, torch read
    # memory not yet written: garbage up to 1e19 in a script that did this).
    from sinkgraph.graph import to_sg, to_torch
    torch.manual_seed(0)
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    want = a @ b
    for _ in range(5):
        out = sinkgraph._C.op("matmul", [to_sg(a), to_sg(b)], [])
        got = to_torch(out)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
