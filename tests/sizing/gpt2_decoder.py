#!/usr/bin/python3
"""A GPT-2-style decoder for the serving tests, in PyTorch (Debian's python3-torch, CPU).

  gpt2_decoder.py export OUT.onnx
      exports the decoder with its KV cache: inputs input_ids [batch, seq], position_ids
      [batch, seq], attn_bias [1, 1, seq, total] (additive causal mask; total = past + seq) and
      past_key_values.N.key [batch, heads, head_dim, past] / .value [batch, heads, past,
      head_dim]; outputs logits and present.N.key / .value (the past concatenated with the new
      tokens). Graph only: the weights keep their names, dims and types, not their data.

  gpt2_decoder.py checkpoint DIR
      writes the same model as a Hugging Face checkpoint folder: config.json (model_type gpt2)
      and model.safetensors (float32, written by hand: 8-byte length, JSON header, data).

  gpt2_decoder.py step decode BATCH CONTEXT | step prefill CHUNK CONTEXT
      runs one step the way a serving engine does, the KV cache in preallocated per-layer
      buffers written in place (no allocation for the cache during the step): a decode step of
      BATCH sequences with CONTEXT-1 cached tokens each, or a prefill chunk of CHUNK tokens after
      CONTEXT-CHUNK cached. Two warm-up steps, then the measured one between two marker requests
      of MARK_BYTES. Run under `modelmem run --trace T.csv --conf preload_threshold_kb:1,...`.
      The cache is made first; what the engine's pool serves (the weights, the inputs and the
      three steps) lies between two marker requests of POOL_MARK_BYTES.

  GPT2_SHAPE=LAYERS,HEADS,EMBD in the environment makes another size (default 2,4,256);
  GPT2_WINDOW=W exports a sliding-window decoder (its present outputs keep the last W tokens).

  gpt2_decoder.py measure T.csv INPUT_BYTES
      prints the peak live bytes between the markers above the live bytes at the first one,
      plus INPUT_BYTES (the step's inputs, made before the first marker; the plan counts them).
"""
import csv
import json
import math
import os
import struct
import sys

LAYERS, HEADS, EMBD, VOCAB, POSITIONS = 2, 4, 256, 2048, 1024
# Another size of the same architecture (bench/serving/formula.py): GPT2_SHAPE=LAYERS,HEADS,EMBD.
if os.environ.get("GPT2_SHAPE"):
    LAYERS, HEADS, EMBD = (int(v) for v in os.environ["GPT2_SHAPE"].split(","))
# A sliding window (GPT2_WINDOW=W, export only): every layer attends to the last W tokens and its
# present output keeps only them (a Slice of the last W), as a windowed cache is exported.
WINDOW = int(os.environ.get("GPT2_WINDOW", "0"))
HEAD_DIM = EMBD // HEADS
MARK_BYTES = 7_340_033
POOL_MARK_BYTES = 5_242_883


def build():
    import torch
    from torch import nn

    # Written as an engine's eager code is: one module per attention and MLP, and every
    # intermediate released as soon as it is used (del), so each lives as long as its last use.
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            # Separate projections (as Llama and NeoX-style checkpoints hold them): a fused one
            # split in three is three views of one tensor in PyTorch, which the eager plan
            # counts as three tensors (docs/serving.md).
            self.q_proj = nn.Linear(EMBD, EMBD)
            self.k_proj = nn.Linear(EMBD, EMBD)
            self.v_proj = nn.Linear(EMBD, EMBD)
            self.c_proj = nn.Linear(EMBD, EMBD)

        def forward(self, h, bias, kv):
            b, t, _ = h.shape
            if WINDOW:
                bias = bias[..., -WINDOW:]
            keys, values = kv(self.k_proj(h).reshape(b, t, HEADS, HEAD_DIM).permute(0, 2, 3, 1),
                              self.v_proj(h).reshape(b, t, HEADS, HEAD_DIM).transpose(1, 2))
            att = torch.softmax(
                self.q_proj(h).reshape(b, t, HEADS, HEAD_DIM).transpose(1, 2) @ keys + bias, dim=-1)
            del keys
            y = (att @ values).transpose(1, 2).reshape(b, t, EMBD)
            del att, values
            return self.c_proj(y)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(EMBD, 4 * EMBD)
            self.c_proj = nn.Linear(4 * EMBD, EMBD)

        def forward(self, h):
            return self.c_proj(torch.relu(self.c_fc(h)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(EMBD)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(EMBD)
            self.mlp = Mlp()

        def forward(self, x, bias, kv):
            x = x + self.attn(self.ln_1(x), bias, kv)
            return x + self.mlp(self.ln_2(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, EMBD)
            self.wpe = nn.Embedding(POSITIONS, EMBD)
            self.h = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(EMBD)
            self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)

        def forward(self, input_ids, position_ids, attn_bias, *past):
            # The export path: present = concat(past, new), as ONNX decoders are exported.
            x = self.wte(input_ids) + self.wpe(position_ids)
            presents = []
            for i, block in enumerate(self.h):
                def cat(k, v, i=i):
                    pk = torch.cat([past[2 * i], k * (1.0 / math.sqrt(HEAD_DIM))], dim=3)
                    pv = torch.cat([past[2 * i + 1], v], dim=2)
                    if WINDOW:
                        pk, pv = pk[:, :, :, -WINDOW:], pv[:, :, -WINDOW:, :]
                    presents.extend([pk, pv])
                    return pk, pv
                x = block(x, attn_bias, cat)
            return (self.lm_head(self.ln_f(x)), *presents)

        def step(self, input_ids, position_ids, attn_bias, caches, past):
            # The serving path: new keys and values written in place into the cache blocks.
            x = self.wte(input_ids) + self.wpe(position_ids)
            t = input_ids.shape[1]
            for i, block in enumerate(self.h):
                kc, vc = caches[i]
                def write(k, v, kc=kc, vc=vc):
                    kc[:, :, :, past:past + t].copy_(k)
                    kc[:, :, :, past:past + t].mul_(1.0 / math.sqrt(HEAD_DIM))
                    vc[:, :, past:past + t, :].copy_(v)
                    return kc[:, :, :, :past + t], vc[:, :, :past + t, :]
                x = block(x, attn_bias, write)
            return self.lm_head(self.ln_f(x))

    torch.manual_seed(0)
    model = Decoder().eval()
    # Norms start as ones and zeros, which the exporter would store once for all layers: random
    # values keep every tensor of the checkpoint its own initializer in the export.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_()
                m.bias.normal_()
    return model


def inputs(batch, seq, past):
    import torch

    ids = torch.randint(0, VOCAB, (batch, seq))
    pos = (torch.arange(seq) + past).expand(batch, seq).contiguous()
    total = past + seq
    bias = torch.zeros(1, 1, seq, total)
    for i in range(seq):
        bias[0, 0, i, past + i + 1:] = float("-inf")
    return ids, pos, bias


def export(out):
    import onnx
    import torch

    model = build()
    ids, pos, bias = inputs(2, 3, 5)
    past, names, axes = [], [], {"input_ids": {0: "batch", 1: "seq"},
                                 "position_ids": {0: "batch", 1: "seq"},
                                 "attn_bias": {2: "seq", 3: "total"}}
    outs = ["logits"]
    axes["logits"] = {0: "batch", 1: "seq"}
    for i in range(LAYERS):
        past += [torch.randn(2, HEADS, HEAD_DIM, 5), torch.randn(2, HEADS, 5, HEAD_DIM)]
        for kind, axis in (("key", 3), ("value", 2)):
            names.append(f"past_key_values.{i}.{kind}")
            outs.append(f"present.{i}.{kind}")
            axes[names[-1]] = {0: "batch", axis: "past"}
            axes[outs[-1]] = {0: "batch", axis: "total"}
    with torch.no_grad():
        torch.onnx.export(model, (ids, pos, bias, *past), out, opset_version=17,
                          input_names=["input_ids", "position_ids", "attn_bias", *names],
                          output_names=outs, dynamic_axes=axes, do_constant_folding=True,
                          dynamo=False)
    m = onnx.load(out)
    if WINDOW:
        # The tracer's shapes for the sliced tensors hold only at the traced length: leave them
        # (and the presents' length) to shape inference.
        del m.graph.value_info[:]
        for o in m.graph.output:
            if o.name.startswith("present"):
                axis = 3 if o.name.endswith("key") else 2
                o.type.tensor_type.shape.dim[axis].Clear()
    for init in m.graph.initializer:
        if init.data_type == onnx.TensorProto.INT64 and len(init.raw_data) <= 1024:
            continue
        if len(init.dims) == 0:
            continue
        for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
            init.ClearField(field)
    onnx.save(m, out)


def checkpoint(folder):
    model = build()
    os.makedirs(folder, exist_ok=True)
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": LAYERS,
              "n_head": HEADS, "n_embd": EMBD, "vocab_size": VOCAB, "n_positions": POSITIONS,
              "n_inner": 4 * EMBD, "torch_dtype": "float32"}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    header, blobs, offset = {}, [], 0
    for name, t in model.state_dict().items():
        data = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def step(kind, n, context):
    import torch

    torch.set_num_threads(1)
    batch, seq = (n, 1) if kind == "decode" else (1, n)
    past = context - seq
    caches = [(torch.zeros(batch, HEADS, HEAD_DIM, context),
               torch.zeros(batch, HEADS, context, HEAD_DIM)) for _ in range(LAYERS)]
    mark = torch.empty(POOL_MARK_BYTES, dtype=torch.uint8)
    del mark
    model = build()
    ids, pos, bias = inputs(batch, seq, past)
    with torch.inference_mode():
        for _ in range(2):
            model.step(ids, pos, bias, caches, past)
        mark = torch.empty(MARK_BYTES, dtype=torch.uint8)
        del mark
        y = model.step(ids, pos, bias, caches, past)
        del y
        mark = torch.empty(MARK_BYTES, dtype=torch.uint8)
        del mark
    mark = torch.empty(POOL_MARK_BYTES, dtype=torch.uint8)
    del mark


def measure(path, input_bytes):
    live, current, marks = {}, 0, 0
    baseline = peak = None
    with open(path, newline="") as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            if row["event"] == "alloc":
                nbytes = int(row["size"])
                if nbytes == MARK_BYTES:
                    marks += 1
                    if marks == 1:
                        baseline = peak = current
                        continue
                    break
                live[row["address"]] = nbytes
                current += nbytes
                if marks == 1:
                    peak = max(peak, current)
            elif row["event"] == "free":
                current -= live.pop(row["address"], 0)
    if marks < 2:
        sys.exit(f"{path}: the two marker requests of {MARK_BYTES} bytes are not in the trace")
    print(peak - baseline + input_bytes)


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "export":
        export(a[1])
    elif len(a) == 2 and a[0] == "checkpoint":
        checkpoint(a[1])
    elif len(a) == 4 and a[0] == "step" and a[1] in ("decode", "prefill"):
        step(a[1], int(a[2]), int(a[3]))
    elif len(a) == 3 and a[0] == "measure":
        measure(a[1], int(a[2]))
    else:
        sys.exit(__doc__)
