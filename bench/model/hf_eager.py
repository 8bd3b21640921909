#!/usr/bin/env python3
"""transformers' own models (BertModel, GPT-2, Llama) made locally from small configs with
random weights (no hub), for the eager figure against PyTorch eager (issue 39 item 3).

  hf_eager.py export FAMILY OUT.onnx SEQ      torch.onnx.export (dynamo=False, opset 17), the
                                              model as transformers builds it by default (SDPA
                                              attention); batch and seq symbolic dims
  hf_eager.py infer FAMILY BATCH SEQ [BATCH SEQ ...]
                                             per case, two warm-ups and one inference framed by
                                              eager_trace.py's markers (run under
                                              `modelmem run --trace`, with MKL_DISABLE_FAST_MM
                                              set empty as eager_trace.py says); one process
  hf_eager.py measure T.csv BATCH SEQ [CASE] the activation peak of the inference of case CASE
                                              (0 = the first pair of markers; the input ids and
                                              mask, int64, counted as eager_trace.py does)

FAMILY: bert (4 layers, hidden 256, 4 heads, intermediate 1024), gpt2 (4 layers, n_embd 256,
4 heads), llama (4 layers, hidden 256, 8 heads, 2 KV heads (GQA), intermediate 688), qwen2
(as llama, with Qwen2's q/k/v biases). The model
takes the token ids and an attention mask of ones (what a tokenizer gives) and returns only
its last hidden state (use_cache=False), as a prefill without a cache would.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eager_trace  # noqa: E402


def build(family):
    import torch
    import transformers as t

    torch.manual_seed(0)
    if family == "bert":
        cfg = t.BertConfig(vocab_size=8192, hidden_size=256, num_hidden_layers=4,
                           num_attention_heads=4, intermediate_size=1024,
                           max_position_embeddings=1024)
        model = t.BertModel(cfg, add_pooling_layer=False)
    elif family == "gpt2":
        cfg = t.GPT2Config(vocab_size=8192, n_embd=256, n_layer=4, n_head=4, n_positions=1024)
        model = t.GPT2Model(cfg)
    elif family == "qwen2":
        cfg = t.Qwen2Config(vocab_size=8192, hidden_size=256, num_hidden_layers=4,
                            num_attention_heads=8, num_key_value_heads=2,
                            intermediate_size=688, max_position_embeddings=1024)
        model = t.Qwen2Model(cfg)
    elif family == "llama":
        cfg = t.LlamaConfig(vocab_size=8192, hidden_size=256, num_hidden_layers=4,
                            num_attention_heads=8, num_key_value_heads=2,
                            intermediate_size=688, max_position_embeddings=1024)
        model = t.LlamaModel(cfg)
    else:
        sys.exit(f"unknown family {family!r}: bert, gpt2, llama or qwen2")
    model.eval()

    class Last(torch.nn.Module):
        """The last hidden state only, no cache: what a prefill computes."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids, mask):
            extra = {} if family == "bert" else {"use_cache": False}
            return self.inner(input_ids=ids, attention_mask=mask, **extra).last_hidden_state

    return Last(model).eval()


def export(family, out, seq):
    import torch

    model = build(family)
    ids = torch.randint(0, 8192, (1, seq))
    torch.onnx.export(model, (ids, torch.ones_like(ids)), out, opset_version=17,
                      input_names=["input_ids", "attention_mask"], output_names=["hidden"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                    "attention_mask": {0: "batch", 1: "seq"},
                                    "hidden": {0: "batch", 1: "seq"}},
                      do_constant_folding=True, dynamo=False)


def infer(family, cases):
    import torch

    torch.set_num_threads(1)
    model = build(family)
    with torch.inference_mode():
        for batch, seq in cases:
            ids = torch.randint(0, 8192, (batch, seq))
            mask = torch.ones_like(ids)
            for _ in range(2):
                model(ids, mask)
            mark = torch.empty(eager_trace.MARK_BYTES, dtype=torch.uint8)
            del mark
            y = model(ids, mask)
            del y
            mark = torch.empty(eager_trace.MARK_BYTES, dtype=torch.uint8)
            del mark
            del ids, mask


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "export":
        export(a[1], a[2], int(a[3]))
    elif len(a) >= 4 and len(a) % 2 == 0 and a[0] == "infer":
        infer(a[1], [(int(a[i]), int(a[i + 1])) for i in range(2, len(a), 2)])
    elif len(a) in (4, 5) and a[0] == "measure":
        # the inputs: int64 ids and an int64 mask of ones (what a tokenizer gives), 16 B a token
        eager_trace.measure(a[1], 2 * int(a[2]), int(a[3]), "bert_base",
                            case=int(a[4]) if len(a) == 5 else 0)
    else:
        sys.exit(__doc__)
