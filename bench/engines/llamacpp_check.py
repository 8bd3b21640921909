"""Checks `modelmem plan --serve model.gguf --engine llama.cpp` against llama.cpp itself: makes a
random-weight model of one family (tests/engines/families.py; transformers, no hub), writes it as
GGUF (tests/engines/gguf_models.py: f16 or q8_0 weights), plans it for a device budget and a
context, loads it in llama.cpp (llama-cpp-python) with exactly the printed -c, -np, -ctk/-ctv,
-b/-ub and flash attention, and prints modelmem's figures beside llama.cpp's log lines.

  python3 bench/engines/llamacpp_check.py llama --kind q8_0 --device-memory 40MiB --context 600

The same run as tests/engines/test_llamacpp.py, for a reader (docs/serving.md). Without
llama-cpp-python (scripts/setup --llama-cpp) it prints modelmem's side and says llama.cpp did not
run."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENGINES = Path(__file__).resolve().parents[2] / "tests" / "engines"
sys.path.insert(0, str(ENGINES))
import gguf_models  # noqa: E402
import test_llamacpp  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=sorted(gguf_models.ARCH))
    ap.add_argument("--kind", choices=["f16", "q8_0"], default="f16", help="the weights' type")
    ap.add_argument("--kv-dtype", default="", help="as plan's --kv-dtype (int8: -ctk q8_0)")
    ap.add_argument("--device-memory", required=True)
    ap.add_argument("--context", type=int, required=True)
    a = ap.parse_args()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    tool = shutil.which("modelmem") or str(Path(os.environ.get("MODELMEM_BINARY_DIR", "build"))
                                           / "modelmem")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{a.family}-{a.kind}.gguf"
        gguf_models.write(test_llamacpp.make_torch(a.family), path, a.kind)
        plan = Path(d) / "plan.json"
        cmd = [tool, "plan", "--serve", str(path), "--device-memory", a.device_memory,
               "--context", str(a.context), "--overhead", "0", "--device-kind", "host",
               "--max-num-seqs", "16", "--max-batched-tokens", "512", "--engine", "llama.cpp",
               "-o", str(plan)]
        if a.kv_dtype:
            cmd += ["--kv-dtype", a.kv_dtype]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr.strip())
        p = json.loads(plan.read_text())
        row = p["engine_formulas"]["llama.cpp"]
        s = p["engines"]["llama.cpp"]
        print(f"modelmem   weights {p['weights_bytes']:,} B ({a.kind}), KV budget "
              f"{p['kv_cache_bytes']:,} B")
        print("modelmem   " + " ".join(f"{k} {v}" for k, v in s.items()))
        for line in row["logs"].split("; "):
            if line.startswith("llama_kv_cache:"):
                print("modelmem   " + line)
        if test_llamacpp.LLAMA_MISSING:
            print("llama.cpp  not run: " + test_llamacpp.LLAMA_MISSING)
            return
        log, seen = test_llamacpp.run_llamacpp(path, s)
        for pattern in [r"n_ctx += \d+", r"n_ctx_seq += \d+", r"llama_kv_cache: size = .*",
                        r"CPU_Mapped model buffer size = .*", r"\w+ compute buffer size = .*"]:
            for m in re.finditer(pattern, log):
                print("llama.cpp  " + m[0].strip())
        print(f"llama.cpp  decoded one micro-batch: {'ok' if seen['decode'] == 0 else 'failed'}")
        print(f"modelmem   activation figure for a chunk of {p['prefill_tokens']} tokens: "
              f"{p['prefill_activation_bytes'] / 2**20:.2f} MiB (a formula)")


if __name__ == "__main__":
    main()
