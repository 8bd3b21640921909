"""The eager figure of transformers' own models against PyTorch 2.x itself (CTest
runtimes.eager_transformers): BertModel, GPT-2 and Llama (GQA) made from small local configs
with random weights (bench/model/hf_eager.py: 4 layers, hidden 256, SDPA attention, no hub),
exported once to ONNX (batch and seq symbolic), each case's inference recorded with `modelmem
run --trace`. `modelmem plan --runtime eager` must not be more than 1 % below PyTorch's
activation peak (the worse error) nor more than 10 % above, at seq 128, 256 and 512 and batch 1
and 4. The plan runs the export's SDPA as PyTorch 2.x's CPU flash-attention kernel (no scores)
and holds Llama's inputs_embeds. GPT-2 is 8-13 % below: GPT2Model's inputs_embeds and
position_embeds and GPT2Block's attn_output are Python locals held until those forwards
return, names the export does not show; expected to fail until modelled."""
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
GPT2_GAP = "GPT-2's forward locals (inputs_embeds, position_embeds, attn_output) not modelled"
ENV = dict(os.environ, OMP_NUM_THREADS="1")
CASES = [(b, s) for s in (128, 256, 512) for b in (1, 4)]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf")
    out = {}
    for family in ("bert", "gpt2", "llama"):
        out[family] = folder / f"{family}.onnx"
        subprocess.run([sys.executable, SCRIPT, "export", family, str(out[family]), "128"],
                       check=True, capture_output=True, env=ENV, timeout=300)
    return out


def eager_peak(onnx, batch, seq):
    p = subprocess.run([CLI, "plan", str(onnx), "--dim", f"batch={batch}", "--dim", f"seq={seq}",
                        "--runtime", "eager"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return int(re.search(r"^eager peak +([0-9,]+)", p.stdout, re.M).group(1).replace(",", ""))


def measured_peak(tmp_path, family, batch, seq):
    trace = tmp_path / f"{family}-{batch}-{seq}.csv"
    r = subprocess.run([CLI, "run", "--conf", "strategy:caching,preload_threshold_kb:1", "--trace",
                        str(trace), "--", sys.executable, SCRIPT, "infer", family, str(batch),
                        str(seq)], capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    m = subprocess.run([sys.executable, SCRIPT, "measure", str(trace), str(batch), str(seq)],
                       capture_output=True, text=True, check=True)
    return int(m.stdout.split()[0])


@pytest.mark.parametrize("batch,seq", CASES)
@pytest.mark.parametrize("family", [
    "bert", pytest.param("gpt2", marks=pytest.mark.xfail(reason=GPT2_GAP, strict=True)), "llama"])
def test_eager_peak_of_transformers_models(tmp_path, exports, family, batch, seq):
    measured = measured_peak(tmp_path, family, batch, seq)
    eager = eager_peak(exports[family], batch, seq)
    assert 0.99 <= eager / measured <= 1.10, (family, batch, seq, eager, measured,
                                              eager / measured)
