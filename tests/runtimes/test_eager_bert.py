"""The eager figure of the bundled BERT encoder against PyTorch 2.x itself (CTest
runtimes.eager_bert): one inference at batch 1 and sequence 384, recorded with `modelmem run
--trace` (bench/model/eager_trace.py), whose activation peak `modelmem plan`'s eager peak must
give within 0.5 %. The attention's locals (q, k, v, scores, context) grow with the sequence
squared: without them the figure was 30 % below PyTorch's here."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="no torch in the interpreter (scripts/setup --runtimes)")

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MODELMEM_BINARY_DIR") or os.path.join(SOURCE, "build")
CLI = os.path.join(BUILD, "modelmem")
SCRIPT = os.path.join(SOURCE, "bench", "model", "eager_trace.py")


@pytest.mark.parametrize("batch,seq", [(1, 384)])
def test_eager_peak_of_the_bundled_bert_is_pytorchs(tmp_path, batch, seq):
    trace = tmp_path / "bert.csv"
    # MKL_DISABLE_FAST_MM empty: MKL keeps its GEMM packing buffers in its own cache (`modelmem
    # run` turns it off otherwise), warm after the warm-up inferences: the measured inference
    # holds PyTorch's tensors only, what the eager figure counts.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_DISABLE_FAST_MM="")
    r = subprocess.run([CLI, "run", "--conf", "strategy:caching,preload_threshold_kb:1", "--trace",
                        str(trace), "--", sys.executable, SCRIPT, "infer", "bert_base", str(batch),
                        str(seq)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    m = subprocess.run([sys.executable, SCRIPT, "measure", str(trace), str(batch), str(seq),
                        "bert_base"], capture_output=True, text=True, check=True)
    measured = int(m.stdout.split()[0])
    p = subprocess.run([CLI, "plan", os.path.join(SOURCE, "models", "bert_base.onnx"), "--dim",
                        f"batch={batch}", "--dim", f"seq={seq}"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    eager = int(re.search(r"^eager peak +([0-9,]+)", p.stdout, re.M).group(1).replace(",", ""))
    assert abs(eager / measured - 1) < 0.005, (eager, measured)
