"""GGUF files and llama.cpp against `modelmem plan --serve model.gguf --engine llama.cpp`.

- Every ggml type of the `gguf` package's GGML_QUANT_SIZES: a file holding one tensor of it; the
  weight bytes modelmem reads equal the tensor's bytes in the file (Q8_1 excepted, see below).
- The model families (Llama, Qwen2, GPT-2, Gemma-2, Mixtral; families.py) written as GGUF in f16 and q8_0
  (gguf_models.py): the weight bytes equal the file's tensor data bytes exactly, and the KV bytes
  per token equal those modelmem reads from the same model's transformers checkpoint.
- Where llama-cpp-python is installed: llama.cpp loads each file with the -c, -np, -ctk/-ctv,
  -b/-ub modelmem prints for a KV budget of about 3.5 sequences, and its log line
  "llama_kv_cache: size = ..." is the one modelmem prints, for -ctk f16 and q8_0; its compute
  buffer is reported beside modelmem's activation figure (not asserted: llama.cpp's graph
  allocator sizes it). A q4_K file made by llama.cpp's own quantizer is read exactly too.
  Gemma-2 at a context where its sliding window sizes the second cache: both cache lines are
  modelmem's, and one sequence more exceeds the plan's KV budget by llama.cpp's own buffers.
  Skips, saying so, where llama-cpp-python is absent (it builds llama.cpp from source:
  docs/benchmarks.md has the cost)."""

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
import gguf_models  # noqa: E402

BINARY = Path(os.environ.get("MODELMEM_BINARY_DIR", HERE.parents[1] / "build")) / "modelmem"

gguf = pytest.importorskip("gguf", reason="the gguf package is not in this environment "
                           "(requirements.txt pins it; scripts/setup installs it)")
try:
    import llama_cpp  # noqa: F401

    LLAMA_MISSING = ""
except Exception as e:  # noqa: BLE001
    LLAMA_MISSING = (f"llama-cpp-python is not in this environment ({e}); it builds llama.cpp "
                     "from source: scripts/setup --llama-cpp installs it (docs/benchmarks.md)")

CONTEXT = 600  # not a multiple of 256: llama.cpp rounds each sequence's cells up
CHUNK = 512


def plan(model, device_memory, kv_dtype="", extra=(), context=CONTEXT):
    out = Path(str(model) + ".plan.json")
    cmd = [str(BINARY), "plan", "--serve", str(model), "--device-memory", str(device_memory),
           "--context", str(context), "--overhead", "0", "--device-kind", "host",
           "--max-num-seqs", "16", "--max-batched-tokens", str(CHUNK), "-o", str(out),
           *extra]
    if kv_dtype:
        cmd += ["--kv-dtype", kv_dtype]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text()), r.stdout


def file_tensor_bytes(path):
    return sum(int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors)


def tiny_writer(path):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(1024)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    return w


# ggml's Q8_1 block is two f16 scales and 32 int8 (ggml-common.h: static_assert 36 bytes); the
# gguf package lists 40 (two f32). No file stores Q8_1 (a dot-product operand only).
GGML_OVERRIDES = {"Q8_1": (32, 36)}


@pytest.mark.parametrize("qtype", sorted(gguf.GGML_QUANT_SIZES, key=int),
                         ids=lambda t: t.name)
def test_every_ggml_type_is_read_exactly(qtype, tmp_path):
    import numpy as np

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    path = tmp_path / f"{qtype.name}.gguf"
    w = tiny_writer(path)
    rows, blocks = 5, 3
    raw = np.random.default_rng(0).integers(0, 255, (rows, blocks * size), dtype=np.uint8)
    w.add_tensor("blk.0.ffn_up.weight", raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    p, _ = plan(path, 1 << 30)
    ggml_block, ggml_size = GGML_OVERRIDES.get(qtype.name, (block, size))
    assert p["weights_bytes"] == rows * blocks * ggml_size
    if qtype.name not in GGML_OVERRIDES:
        assert p["weights_bytes"] == file_tensor_bytes(path) == raw.nbytes
        assert (ggml_block, ggml_size) == (block, size)


def make_torch(family):
    import torch
    import transformers

    cls_name, args = families.FAMILIES[family]
    kw = {} if family == "gpt2" else dict(families.COMMON)
    kw.update(args)
    config = getattr(transformers, cls_name)(**kw)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).float()


FAMILIES = sorted(gguf_models.ARCH)


@pytest.mark.parametrize("kind", ["f16", "q8_0"])
@pytest.mark.parametrize("family", FAMILIES)
def test_gguf_weights_exact(family, kind, tmp_path):
    model = make_torch(family)
    path = tmp_path / f"{family}-{kind}.gguf"
    written = gguf_models.write(model, path, kind)
    p, text = plan(path, 1 << 34)
    assert p["weights_bytes"] == written == file_tensor_bytes(path), text
    assert "GGUF: metadata and tensor infos" in text
    # The KV cache per token is the checkpoint's (f16 both: the config's bfloat16, llama.cpp's
    # default -ctk f16), and so is the context (the model's positions).
    folder = families.make(family, tmp_path / family)
    ck, _ = plan(folder, 1 << 34)
    assert p["kv_bytes_per_token"] == ck["kv_bytes_per_token"]
    assert p["max_context_capped"] and ck["max_context_capped"]
    assert p["max_context"] == ck["max_context"]


KV_LINE = re.compile(r"llama_kv_cache: size = .*")
COMPUTE = re.compile(r"(\w+) compute buffer size = +([\d.]+) MiB")
GGML_ID = {"f16": 1, "q8_0": 8}


def run_llamacpp(path, s):
    args = [sys.executable, str(HERE / "llamacpp_child.py"), str(path), s["-c"], s["-np"],
            str(GGML_ID[s["-ctk"]]), str(GGML_ID[s["-ctv"]]), s["-b"], s["-ub"]]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-4000:]
    return log, json.loads(log.split("RESULT ", 1)[1].splitlines()[0])


@pytest.mark.parametrize("family", FAMILIES)
def test_llamacpp_allocates_what_modelmem_prints(family, tmp_path):
    if LLAMA_MISSING:
        pytest.skip(LLAMA_MISSING)
    model = make_torch(family)
    report = []
    for kind in ["f16", "q8_0"]:
        path = tmp_path / f"{family}-{kind}.gguf"
        gguf_models.write(model, path, kind)
        for kv_dtype in ["", "int8"]:  # -ctk/-ctv f16, q8_0
            probe, _ = plan(path, 1 << 34, kv_dtype, ["--engine", "llama.cpp"])
            f = probe["engine_formulas"]["llama.cpp"]["log_figures"]
            per_seq = f["kv_bytes"] // f["n_seq"]
            budget = probe["need_bytes"] + int(3.5 * per_seq)
            p, text = plan(path, budget, kv_dtype, ["--engine", "llama.cpp"])
            row = p["engine_formulas"]["llama.cpp"]
            s = p["engines"]["llama.cpp"]
            f = row["log_figures"]
            # The printed settings hold 3 sequences of the context in the KV budget; a 4th does
            # not fit.
            assert int(s["-np"]) == 3, text
            assert f["kv_bytes"] <= p["kv_cache_bytes"] < (f["n_seq"] + 1) * per_seq
            log, seen = run_llamacpp(path, s)
            assert seen["decode"] == 0, log[-3000:]
            assert seen["n_ctx"] == f["n_ctx"] and seen["n_seq_max"] == f["n_seq"]
            m = KV_LINE.search(log)
            assert m, log[-3000:]
            assert row["logs"].startswith(m[0].strip()), (m[0], row["logs"])
            buffers = {b: float(mib) for b, mib in COMPUTE.findall(log)}
            report.append(f"{family} {kind} -ctk {s['-ctk']}: {m[0].strip()}; compute buffers "
                          f"{buffers} MiB against modelmem's prefill activation figure "
                          f"{p['prefill_activation_bytes'] / 2**20:.2f} MiB")
    print("\n".join(report))


def test_q4_k_from_llamacpp_quantizer_is_read_exactly(tmp_path):
    if LLAMA_MISSING:
        pytest.skip(LLAMA_MISSING)
    import llama_cpp

    src = tmp_path / "llama-f16.gguf"
    gguf_models.write(make_torch("llama"), src, "f16")
    dst = tmp_path / "llama-q4_k_m.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    assert rc == 0
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(dst)).tensors}
    assert "Q4_K" in types, types
    p, _ = plan(dst, 1 << 34)
    assert p["weights_bytes"] == file_tensor_bytes(dst)


KV_BUFFERS = re.compile(r"CPU KV buffer size = +([\d.]+) MiB")
SIZE_LINES = re.compile(r"llama_kv_cache: size = .*")


def test_gemma2_sliding_window_cache_is_llamacpps(tmp_path):
    """Gemma-2 alternates sliding-window and full layers: llama.cpp keeps two caches, the
    sliding one of pad256(window x sequences + micro-batch) cells when that is fewer than the
    full one's. At a context of 2000 (2048 cells a sequence) the window of 256 makes it the
    smaller: both of llama.cpp's lines are the ones modelmem prints, for -ctk f16 and q8_0, and
    one sequence more than the printed -np does not fit in the plan's KV budget by llama.cpp's
    own buffer sizes."""
    if LLAMA_MISSING:
        pytest.skip(LLAMA_MISSING)
    model = make_torch("gemma2")
    path = tmp_path / "gemma2-f16.gguf"
    gguf_models.write(model, path, "f16")
    for kv_dtype in ["", "int8"]:
        probe, _ = plan(path, 1 << 34, kv_dtype, ["--engine", "llama.cpp"], 2000)
        f = probe["engine_formulas"]["llama.cpp"]["log_figures"]
        # a budget of about 3.5 sequences of the full cache and 3 of the window's
        per_seq = (f["kv_bytes"] - f["swa_k_bytes"] - f["swa_v_bytes"]) // f["n_seq"]
        budget = probe["need_bytes"] + int(3.8 * per_seq)
        p, text = plan(path, budget, kv_dtype, ["--engine", "llama.cpp"], 2000)
        s, f = p["engines"]["llama.cpp"], p["engine_formulas"]["llama.cpp"]["log_figures"]
        n = int(s["-np"])
        assert n >= 2 and f["n_ctx_seq"] == 2048, text
        assert f["swa_cells"] < f["cells"], f  # the window sizes the sliding cache
        log, seen = run_llamacpp(path, s)
        assert seen["decode"] == 0 and seen["n_seq_max"] == n, log[-3000:]
        lines = [m.strip() for m in SIZE_LINES.findall(log)]
        assert len(lines) == 2, log[-3000:]  # the full cache, then the sliding one
        assert p["engine_formulas"]["llama.cpp"]["logs"].startswith("; ".join(lines)), (
            lines, p["engine_formulas"]["llama.cpp"]["logs"])
        assert f"({int(f['swa_cells']):6d} cells" in lines[1], lines
        # One sequence more: llama.cpp's own buffers exceed the budget the plan gave the KV cache.
        more = dict(s, **{"-np": str(n + 1), "-c": str((n + 1) * int(f["n_ctx_seq"]))})
        log, seen = run_llamacpp(path, more)
        bufs = [float(x) for x in KV_BUFFERS.findall(log)]
        assert len(bufs) == 2 and seen["n_seq_max"] == n + 1, log[-3000:]
        assert sum(bufs) * 2**20 > p["kv_cache_bytes"] + 0.01 * 2**20, (bufs, p["kv_cache_bytes"])
        print(f"gemma2 -ctk {s['-ctk']} -np {n}: {'; '.join(lines)}; -np {n + 1}: {bufs} MiB "
              f"against the plan's KV budget {p['kv_cache_bytes'] / 2**20:.2f} MiB")
