#!/usr/bin/python3
"""The checkpoint-only activation formula (docs/serving.md) against the ONNX path and a recorded
run, on the GPT-2-style decoder of the tests (tests/sizing/gpt2_decoder.py) at three sizes.

For each size: the decoder is exported to ONNX with its KV cache and written as a checkpoint
folder; `modelmem plan --serve CHECKPOINT` is run with `--onnx` (the steps planned from the
export) and without (the formula); the decode step and the prefill chunk are run by PyTorch eager
under `modelmem run --trace` and their peaks measured. Prints a Markdown table: per step the
formula, the planned and the recorded peak and the formula's ratio to the recorded one; then the
need on the strategy and the KV tokens with each activation source.

  bench/serving/formula.py [BUILD]      (Debian's python3 with torch and onnx)
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "sizing", "gpt2_decoder.py")
SIZES = [(2, 4, 256), (4, 8, 512), (6, 12, 768)]
SHAPE = ["--device-memory", "1GiB", "--context", "512", "--max-num-seqs", "16",
         "--max-batched-tokens", "64", "--overhead", "0"]
# The inputs made before the measured step's first marker (the plan counts them).
INPUTS = {"decode": 16 * 8 * 2 + 512 * 4, "prefill": 64 * 8 * 2 + 64 * 512 * 4}


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    cli = os.path.join(build, "modelmem")
    print("| decoder (layers, heads, width) | step | formula | planned (ONNX) | recorded | "
          "formula / recorded | need: formula / ONNX | KV tokens: formula / ONNX |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in SIZES:
            env = dict(os.environ, GPT2_SHAPE=",".join(map(str, shape)))
            onnx, ck = os.path.join(tmp, "g.onnx"), os.path.join(tmp, "ck")
            subprocess.run(["/usr/bin/python3", SCRIPT, "export", onnx], env=env, check=True,
                           capture_output=True)
            subprocess.run(["/usr/bin/python3", SCRIPT, "checkpoint", ck], env=env, check=True,
                           capture_output=True)
            plans = {}
            for source, extra in (("formula", []), ("onnx", ["--onnx", onnx])):
                out = os.path.join(tmp, source + ".json")
                subprocess.run([cli, "plan", "--serve", ck, *SHAPE, *extra, "-o", out],
                               check=True, capture_output=True)
                plans[source] = json.load(open(out))
            f, o = plans["formula"], plans["onnx"]
            for kind, n in (("decode", 16), ("prefill", 64)):
                trace = os.path.join(tmp, kind + ".csv")
                subprocess.run([cli, "run", "--conf", "strategy:caching,preload_threshold_kb:1",
                                "--trace", trace, "--", "/usr/bin/python3", SCRIPT, "step", kind,
                                str(n), "512"], env=env, check=True, capture_output=True)
                rec = int(subprocess.run(["/usr/bin/python3", SCRIPT, "measure", trace,
                                          str(INPUTS[kind])], check=True, capture_output=True,
                                         text=True).stdout)
                key = kind + "_activation_bytes"
                print(f"| {shape} | {kind} | {f[key]:,} | {o[key]:,} | {rec:,} | "
                      f"{f[key] / rec:.2f} | {f['need_bytes'] >> 20} / {o['need_bytes'] >> 20} MiB"
                      f" | {f['kv_tokens']:,} / {o['kv_tokens']:,} |")


if __name__ == "__main__":
    main()
