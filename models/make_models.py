#!/usr/bin/python3
"""Makes the example models of modelmem: graph-only ONNX files (weights keep their dims and
types, but carry no data) for ResNet-50, a BERT-base encoder, a GPT-2-style decoder exported with
its KV cache, and a tiny hand-checkable model.

Run with Debian's python3 (python3-torch, python3-torchvision, python3-onnx):
    /usr/bin/python3 models/make_models.py [OUTDIR]
Random weights (fixed seed), nothing is downloaded.
"""
import math
import os
import sys

import onnx
import onnx.numpy_helper
import torch
import torchvision
from onnx import TensorProto, helper

OPSET = 13
# Initializers up to this many bytes keep their data: the small integer tensors among them are
# reshape targets and axes that shape inference must read. Everything larger is a weight.
KEEP_DATA_BYTES = 1024


def strip_weights(path):
    """Drops the data of every weight, keeping name, dims and data type. Small int64
    initializers (reshape targets, axes) keep theirs: shape inference reads them."""
    model = onnx.load(path)
    for init in model.graph.initializer:
        nbytes = onnx.numpy_helper.to_array(init).nbytes
        if init.data_type == TensorProto.INT64 and nbytes <= KEEP_DATA_BYTES:
            continue
        for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                      "uint64_data"):
            init.ClearField(field)
    onnx.save(model, path)


class Embeddings(torch.nn.Module):
    def __init__(self, vocab=30522, hidden=768, max_pos=512):
        super().__init__()
        self.word = torch.nn.Embedding(vocab, hidden)
        self.position = torch.nn.Embedding(max_pos, hidden)
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, input_ids):
        seq = input_ids.size(1)
        pos = torch.arange(seq, device=input_ids.device).unsqueeze(0)
        return self.norm(self.word(input_ids) + self.position(pos))


class EncoderLayer(torch.nn.Module):
    """One BERT layer, written out so that the export keeps PyTorch's dynamic reshape chains."""

    def __init__(self, hidden=768, heads=12, ffn=3072):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.q = torch.nn.Linear(hidden, hidden)
        self.k = torch.nn.Linear(hidden, hidden)
        self.v = torch.nn.Linear(hidden, hidden)
        self.out = torch.nn.Linear(hidden, hidden)
        self.norm1 = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.ffn1 = torch.nn.Linear(hidden, ffn)
        self.ffn2 = torch.nn.Linear(ffn, hidden)
        self.norm2 = torch.nn.LayerNorm(hidden, eps=1e-12)

    def split(self, x):
        b, s, _ = x.size()
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        b, s, h = x.size()
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        ctx = ctx.transpose(1, 2).reshape(b, s, h)
        x = self.norm1(x + self.out(ctx))
        return self.norm2(x + self.ffn2(torch.nn.functional.gelu(self.ffn1(x))))


class BertEncoder(torch.nn.Module):
    def __init__(self, layers=12):
        super().__init__()
        self.embeddings = Embeddings()
        self.layers = torch.nn.ModuleList([EncoderLayer() for _ in range(layers)])

    def forward(self, input_ids):
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x)
        return x


def export(module, example, path, input_name, dynamic):
    module.eval()
    with torch.no_grad():
        torch.onnx.export(module, example, path, opset_version=OPSET, input_names=[input_name],
                          output_names=["output"], dynamic_axes=dynamic, do_constant_folding=True,
                          dynamo=False)
    strip_weights(path)


def make_tiny(path):
    """Seven nodes, hand-checked in tests/model/tiny_test.cpp: MatMul, Relu (in place), MatMul,
    Add (in place), Reshape (alias), MatMul, Softmax. Input X is [n, 64] float32."""
    inits = [
        helper.make_tensor("W1", TensorProto.FLOAT, [64, 128], [0.0] * (64 * 128)),
        helper.make_tensor("W2", TensorProto.FLOAT, [128, 128], [0.0] * (128 * 128)),
        helper.make_tensor("W3", TensorProto.FLOAT, [64, 32], [0.0] * (64 * 32)),
        helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 64]),
    ]
    nodes = [
        helper.make_node("MatMul", ["X", "W1"], ["A"], name="mm1"),
        helper.make_node("Relu", ["A"], ["B"], name="relu"),
        helper.make_node("MatMul", ["B", "W2"], ["C"], name="mm2"),
        helper.make_node("Add", ["C", "B"], ["D"], name="residual"),
        helper.make_node("Reshape", ["D", "shape"], ["E"], name="reshape"),
        helper.make_node("MatMul", ["E", "W3"], ["F"], name="mm3"),
        helper.make_node("Softmax", ["F"], ["Y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(nodes, "tiny",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["m", 32])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="modelmem make_models.py")
    onnx.checker.check_model(model)
    onnx.save(model, path)
    strip_weights(path)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    make_tiny(os.path.join(out, "tiny.onnx"))
    export(torchvision.models.resnet50(weights=None), torch.randn(1, 3, 224, 224),
           os.path.join(out, "resnet50.onnx"), "input", {"input": {0: "batch"}, "output": {0: "batch"}})
    export(BertEncoder(), torch.randint(0, 30522, (1, 128)), os.path.join(out, "bert_base.onnx"),
           "input_ids", {"input_ids": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}})
    # The GPT-2-style decoder with its KV cache of the serving tests (tests/sizing/).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "sizing"))
    import gpt2_decoder
    gpt2_decoder.export(os.path.join(out, "gpt2_decoder.onnx"))
    for name in ("tiny.onnx", "resnet50.onnx", "bert_base.onnx", "gpt2_decoder.onnx"):
        print(name, os.path.getsize(os.path.join(out, name)), "bytes")


if __name__ == "__main__":
    main()
