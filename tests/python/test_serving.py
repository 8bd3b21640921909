"""modelmem.plan_serving(): the serving plan of `modelmem plan --serve`, the same fields."""
import json
import os
import subprocess

import pytest

import modelmem
from conftest import CLI, SOURCE

DECODER = os.path.join(SOURCE, "models", "gpt2_decoder.onnx")
ARGS = dict(context=512, max_num_seqs=16, max_batched_tokens=64, overhead=0)


def test_plan_serving_returns_what_the_cli_writes(tmp_path):
    out = tmp_path / "serve.json"
    subprocess.run([CLI, "plan", "--serve", DECODER, "--device-memory", "64MiB", "--context", "512",
                    "--max-num-seqs", "16", "--max-batched-tokens", "64", "--overhead", "0",
                    "-o", str(out)],
                   check=True, capture_output=True)
    cli = json.loads(out.read_text())
    p = modelmem.plan_serving(DECODER, "64MiB", **ARGS)
    assert p == cli
    # a typed object: every field an attribute too
    assert isinstance(p, modelmem.ServingPlan)
    assert p.kv_tokens == p["kv_tokens"] and p.engines is p["engines"]
    assert set(dir(p)) >= set(cli)
    with pytest.raises(AttributeError, match="no field 'kv_token'"):
        p.kv_token  # noqa: B018
    for field in ("weights_bytes", "activation_bytes", "kv_bytes_per_token", "kv_tokens",
                  "max_concurrency", "max_context", "engines"):
        assert field in p
    assert p["kv_bytes_per_token"] == 4096
    assert p["engines"]["vllm"]["--kv-cache-memory-bytes"] == str(p["kv_cache_bytes"])
    assert modelmem.plan_serving(DECODER, 64 << 20, **ARGS) == p
    assert p["need_bytes"] == p["weights_bytes"] + p["activation_bytes"]
    w = modelmem.plan_serving(DECODER, "64MiB", kv_window=["64"], strategy="expandable", **ARGS)
    assert w["kv_layers"]["sliding"] == {"layers": 2, "bytes_per_token": 4096, "window": 64}
    assert w["strategy"] == "strategy:caching,expandable_segments:True"
    one = modelmem.plan_serving(DECODER, "64MiB", engine="vllm", **ARGS)
    assert list(one["engines"]) == ["vllm"] and one["engines"]["vllm"] == p["engines"]["vllm"]
    long = dict(ARGS, context=2048)
    with pytest.raises(modelmem.InvalidInputError, match="longer than the model's 1024 positions"):
        modelmem.plan_serving(DECODER, "512MiB", **long)
    assert modelmem.plan_serving(DECODER, "512MiB", ignore_model_limits=True,
                                 **long)["context"] == 2048


def test_plan_serving_bad_input():
    with pytest.raises(modelmem.InvalidInputError, match="not leave room for a KV cache"):
        modelmem.plan_serving(DECODER, "1MiB", **ARGS)
    with pytest.raises(modelmem.InvalidInputError, match="--kv nope: expected INPUT=OUTPUT"):
        modelmem.plan_serving(DECODER, "64MiB", kv=["nope"], **ARGS)
    with pytest.raises(modelmem.InvalidInputError, match="--block-size 0"):
        modelmem.plan_serving(DECODER, "64MiB", block_size=0)
