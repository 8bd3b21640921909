"""Page faults of vLLM's CPU engine steps, back to back, under the allocator this process runs
with (LD_PRELOAD): the kernel's minor-fault count (getrusage) around each `llm_engine.step()`,
summed over the prefill steps (a new batch of sequences) and the decode steps apart. The model is
bench/speed/bench.py's small random-weight Llama; `bench.py` measures latency with its workers
interleaved, where time-based cache decay (modelmem's cache_decay_ms, jemalloc's dirty decay)
fires between a worker's steps: here the steps run as a server runs them.

  python3 bench/speed/vllm_step_faults.py [--batch 32] [--batches 4]
  python3 bench/speed/vllm_step_faults.py --arms build   # each configuration of bench.py
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32, help="sequences decoding at once")
    ap.add_argument("--warmup", type=int, default=2, help="batches before the counted ones")
    ap.add_argument("--batches", type=int, default=4, help="batches counted")
    ap.add_argument("--model", help="a model folder (default: made here)")
    ap.add_argument("--arms", metavar="BUILD",
                    help="run this script once under each configuration of bench.py (its "
                         "LD_PRELOAD and settings, with BUILD's modelmem), one line each")
    a = ap.parse_args()
    folder = a.model
    if folder is None:
        folder = os.path.join(tempfile.mkdtemp(prefix="modelmem-vllm-"), "llama")
        bench.vllm_model(folder)
    if a.arms:
        argv = [sys.executable, os.path.abspath(__file__), "--model", folder, "--batch",
                str(a.batch), "--warmup", str(a.warmup), "--batches", str(a.batches)]
        for label, env in bench.configs(os.path.abspath(a.arms)):
            r = subprocess.run(argv, env={**os.environ, "OMP_NUM_THREADS": "2", **env},
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            lines = r.stdout.strip().splitlines()
            print(f"{label:<26} {lines[-1] if lines else f'failed (exit {r.returncode})'}",
                  flush=True)
        return
    from vllm import LLM, SamplingParams

    tokens, prompt = bench.VLLM_TOKENS, bench.VLLM_PROMPT
    llm = LLM(model=folder, skip_tokenizer_init=True, enforce_eager=True, seed=0,
              max_model_len=2 * (prompt + tokens), max_num_seqs=max(a.batch, 2),
              max_num_batched_tokens=max(256, a.batch * prompt), kv_cache_memory_bytes=64 << 20)
    engine = llm.llm_engine
    params = SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True,
                            detokenize=False, temperature=0)
    submitted = 0
    prefill, decode, decode_ns = [], [], []
    for batch in range(a.warmup + a.batches):
        for _ in range(a.batch):
            ids = [(7919 * submitted + 31 * j) % 8000 + 1 for j in range(prompt)]
            engine.add_request(str(submitted), {"prompt_token_ids": ids}, params)
            submitted += 1
        first = True
        while engine.has_unfinished_requests():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter_ns()
            engine.step()
            t = time.perf_counter_ns() - t
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            if batch >= a.warmup:
                (prefill if first else decode).append(faults)
                if not first:
                    decode_ns.append(t)
            first = False
    busy = sorted((f for f in decode if f), reverse=True)
    print(f"prefill steps {len(prefill)}: {sum(prefill)} faults; decode steps {len(decode)}: "
          f"{sum(decode)} faults (in {len(busy)} of them, the most {busy[0] if busy else 0}); "
          f"decode step p50 {statistics.median(decode_ns) / 1e6:.2f} ms (wall time: compare "
          f"runs only side by side)", flush=True)


if __name__ == "__main__":
    main()
