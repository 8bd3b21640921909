"""One llama.cpp context (llama-cpp-python's bindings of llama.h), for test_llamacpp.py: loads a
GGUF file on the CPU, creates a context with the given -c, -np, -ctk/-ctv, -fa, -b and -ub, and
decodes one micro-batch, with llama.cpp's log on stderr. Prints RESULT {json} on stdout.

usage: llamacpp_child.py MODEL N_CTX N_SEQ TYPE_K TYPE_V N_BATCH N_UBATCH"""

import ctypes
import json
import sys

import llama_cpp


@llama_cpp.llama_log_callback
def _log(level, text, user_data):
    sys.stderr.write(text.decode("utf-8", errors="replace"))
    sys.stderr.flush()


def main():
    path, n_ctx, n_seq, type_k, type_v, n_batch, n_ubatch = sys.argv[1:8]
    llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
    if not model:
        sys.exit("llama.cpp could not load " + path)
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = int(n_ctx)
    cp.n_seq_max = int(n_seq)
    cp.n_batch = int(n_batch)
    cp.n_ubatch = int(n_ubatch)
    cp.type_k = int(type_k)
    cp.type_v = int(type_v)
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    cp.swa_full = False  # llama-server's default
    cp.n_threads = cp.n_threads_batch = 2
    ctx = llama_cpp.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("llama.cpp could not create the context")
    # One micro-batch of tokens on the first sequence: the graph runs in what it reserved.
    n = min(int(n_ubatch), 64)
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    for i in range(n):
        batch.token[i] = 3 + i
        batch.pos[i] = i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = i == n - 1
    batch.n_tokens = n
    rc = llama_cpp.llama_decode(ctx, batch)
    result = {"n_ctx": llama_cpp.llama_n_ctx(ctx), "n_seq_max": llama_cpp.llama_n_seq_max(ctx),
              "decode": rc}
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
