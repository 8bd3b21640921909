"""The eager figure of transformers' own models against PyTorch 2.x itself (CTest
runtimes.eager_transformers): BertModel, GPT-2 and Llama (GQA) made from small local configs
with random weights (bench/model/hf_eager.py: 4 layers, hidden 256, SDPA attention, no hub),
exported to ONNX, one inference at batch 1 and sequence 128 recorded with `modelmem run
--trace`. `modelmem plan --runtime eager` must not be more than 1 % below PyTorch's activation
peak (the worse error) nor more than 10 % above. GPT-2 is 13 % below (Python locals of
GPT2Model.forward and GPT2Block.forward: inputs_embeds, position_embeds and attn_output, held
until the forward returns, which the export does not show): expected to fail until modelled."""
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


@pytest.mark.parametrize("family", [
    "bert", pytest.param("gpt2", marks=pytest.mark.xfail(reason=GPT2_GAP, strict=True)), "llama"])
def test_eager_peak_of_transformers_models(tmp_path, family):
    batch, seq = 1, 128
    env = dict(os.environ, OMP_NUM_THREADS="1")
    onnx = tmp_path / f"{family}.onnx"
    subprocess.run([sys.executable, SCRIPT, "export", family, str(onnx), str(seq)], check=True,
                   capture_output=True, env=env, timeout=300)
    trace = tmp_path / f"{family}.csv"
    r = subprocess.run([CLI, "run", "--conf", "strategy:caching,preload_threshold_kb:1", "--trace",
                        str(trace), "--", sys.executable, SCRIPT, "infer", family, str(batch),
                        str(seq)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    m = subprocess.run([sys.executable, SCRIPT, "measure", str(trace), str(batch), str(seq)],
                       capture_output=True, text=True, check=True)
    measured = int(m.stdout.split()[0])
    p = subprocess.run([CLI, "plan", str(onnx), "--dim", f"batch={batch}", "--dim", f"seq={seq}",
                        "--runtime", "eager"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    eager = int(re.search(r"^eager peak +([0-9,]+)", p.stdout, re.M).group(1).replace(",", ""))
    assert 0.99 <= eager / measured <= 1.10, (family, eager, measured, eager / measured)
