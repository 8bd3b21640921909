"""ONNX Runtime's own activation memory against `modelmem plan`'s ideal arena (CTest
runtimes.ort_arena): ResNet-18 at 64x64, batch 1 and 4, one ORT session with memory patterns on
and the CPU arena off (so ORT asks malloc for its blocks, where the trace sees them), recorded
with `modelmem run --trace` (bench/ort/ort_arena.py). ORT's steady inference (the third: the first records the
memory pattern) is one block of the pattern's size plus the graph output; with the input it must
lie within [0.9, 1.3] x the ideal arena (1.16-1.17 measured here on ORT 1.32: ORT's pattern
planner places each buffer as it comes in the best-fitting free gap, where plan lays out all
at once)."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime", reason="no onnxruntime in the interpreter (scripts/setup)")
pytest.importorskip("torchvision", reason="no torchvision in the interpreter (scripts/setup)")

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MODELMEM_BINARY_DIR") or os.path.join(SOURCE, "build")
CLI = os.path.join(BUILD, "modelmem")
SCRIPT = os.path.join(SOURCE, "bench", "ort", "ort_arena.py")
SIZE = 64
SETTING = "arena=0"  # memory patterns on (ORT's default), CPU arena off
LOW, HIGH = 0.9, 1.3


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("ort") / "resnet18.onnx"
    subprocess.run([sys.executable, SCRIPT, "export", "resnet18", str(path), str(SIZE)],
                   check=True, capture_output=True, text=True, timeout=300)
    return path


@pytest.mark.parametrize("batch", [1, 4])
def test_ort_with_memory_patterns_is_near_plans_ideal_arena(tmp_path, model, batch):
    trace = tmp_path / "ort.csv"
    r = subprocess.run([CLI, "run", "--conf", "strategy:caching,preload_threshold_kb:1",
                        "--trace", str(trace), "--", sys.executable, SCRIPT, "infer", str(model),
                        str(batch), str(SIZE), SETTING],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    m = subprocess.run([sys.executable, SCRIPT, "measure", str(trace), SETTING],
                       capture_output=True, text=True, check=True)
    runs = [int(v) for v in m.stdout.split()[1:]]
    assert len(runs) == 6, m.stdout  # 3 inferences, all, held, session
    steady = runs[2] + batch * 3 * SIZE * SIZE * 4  # the input, which plan counts
    p = subprocess.run([CLI, "plan", str(model), "--dim", f"batch={batch}"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    ideal = int(re.search(r"^ideal arena +([0-9,]+)", p.stdout, re.M).group(1).replace(",", ""))
    assert LOW * ideal <= steady <= HIGH * ideal, (steady, ideal, steady / ideal)
