#!/usr/bin/python3
"""A serving loop of the test decoder (gpt2_decoder.py) as an engine runs one: argv BATCH CONTEXT
CHUNK. The KV cache of BATCH sequences of CONTEXT tokens is preallocated per layer (as vLLM's
blocks are), each sequence is prefilled in chunks of CHUNK tokens up to CONTEXT - 1, then one
decode step runs all BATCH sequences at once. Under `modelmem run --conf` with a default pool,
every allocation of the process from the weights on is in the pool. Prints "ok BATCH" or
"refused BATCH: ..." (an allocation the pool refused). docs/fleet.md runs it under the pool
`modelmem place` gives a served model."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_decoder as g  # noqa: E402


def main(batch, context, chunk):
    import torch

    torch.set_num_threads(1)
    try:
        model = g.build()
        caches = [(torch.zeros(batch, g.HEADS, g.HEAD_DIM, context),
                   torch.zeros(batch, g.HEADS, context, g.HEAD_DIM)) for _ in range(g.LAYERS)]
        with torch.inference_mode():
            for b in range(batch):
                rows = [(k[b:b + 1], v[b:b + 1]) for k, v in caches]
                past = 0
                while past < context - 1:
                    seq = min(chunk, context - 1 - past)
                    ids, pos, bias = g.inputs(1, seq, past)
                    y = model.step(ids, pos, bias, rows, past)
                    del y, ids, pos, bias
                    past += seq
            ids, pos, bias = g.inputs(batch, 1, context - 1)
            y = model.step(ids, pos, bias, caches, context - 1)
            del y
        print(f"ok {batch}", flush=True)
    except RuntimeError as e:
        print(f"refused {batch}: {e}".splitlines()[0], flush=True)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
