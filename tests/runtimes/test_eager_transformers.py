"""The eager figure of transformers' own models against PyTorch 2.x itself (CTest
runtimes.eager_transformers): BertModel, GPT-2, Llama (GQA) and Qwen2 (GQA, q/k/v biases) made
from small local configs with random weights (bench/model/hf_eager.py: 4 layers, hidden 256,
SDPA attention, no hub), exported once to ONNX (batch and seq symbolic); one process per
family runs every case, each inference framed by its own markers, recorded with `modelmem run
--trace`. At seq 128, 256 and 512 and batch 1 and 4, `modelmem plan --runtime eager` must not be
more than 1 % below PyTorch's activation peak (the worse error) nor more than 10 % above. The
plan runs the export's SDPA as PyTorch 2.x's CPU flash-attention kernel (no scores) and holds
the forward locals the export does not show (Llama's and Qwen2's inputs_embeds, GPT-2's
inputs_embeds, position_embeds and attn_output; docs/plan.md)."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="no torch in the interpreter (scripts/setup --runtimes)")
pytest.importorskip("transformers", reason="no transformers in the interpreter")

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MODELMEM_BINARY_DIR") or os.path.join(SOURCE, "build")
CLI = os.path.join(BUILD, "modelmem")
SCRIPT = os.path.join(SOURCE, "bench", "model", "hf_eager.py")
# MKL_DISABLE_FAST_MM empty: MKL keeps its GEMM packing buffers in its own cache (`modelmem run`
# turns it off otherwise), warm after each case's warm-ups: the measured inference holds
# PyTorch's tensors only, what the eager figure counts (as tests/runtimes/test_eager_bert.py).
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_DISABLE_FAST_MM="")
CASES = [(b, s) for s in (128, 256, 512) for b in (1, 4)]
FAMILIES = ("bert", "gpt2", "llama", "qwen2")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Per family: the ONNX export and PyTorch's peak in each case."""
    folder = tmp_path_factory.mktemp("hf")
    out = {}
    for family in FAMILIES:
        onnx = folder / f"{family}.onnx"
        subprocess.run([sys.executable, SCRIPT, "export", family, str(onnx), "128"],
                       check=True, capture_output=True, env=ENV, timeout=300)
        trace = folder / f"{family}.csv"
        args = [str(v) for case in CASES for v in case]
        r = subprocess.run([CLI, "run", "--conf", "strategy:caching,preload_threshold_kb:1",
                            "--trace", str(trace), "--", sys.executable, SCRIPT, "infer", family,
                            *args], capture_output=True, text=True, env=ENV, timeout=300)
        assert r.returncode == 0, r.stderr
        peaks = {}
        for k, (batch, seq) in enumerate(CASES):
            m = subprocess.run([sys.executable, SCRIPT, "measure", str(trace), str(batch),
                                str(seq), str(k)], capture_output=True, text=True, check=True)
            peaks[(batch, seq)] = int(m.stdout.split()[0])
        out[family] = (onnx, peaks)
    return out


def eager_peak(onnx, batch, seq):
    p = subprocess.run([CLI, "plan", str(onnx), "--dim", f"batch={batch}", "--dim", f"seq={seq}",
                        "--runtime", "eager"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return int(re.search(r"^eager peak +([0-9,]+)", p.stdout, re.M).group(1).replace(",", ""))


@pytest.mark.parametrize("batch,seq", CASES)
@pytest.mark.parametrize("family", FAMILIES)
def test_eager_peak_of_transformers_models(measured, family, batch, seq):
    onnx, peaks = measured[family]
    eager = eager_peak(onnx, batch, seq)
    ratio = eager / peaks[(batch, seq)]
    assert 0.99 <= ratio <= 1.10, (family, batch, seq, eager, peaks[(batch, seq)], ratio)

