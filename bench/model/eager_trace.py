#!/usr/bin/env python3
"""The eager figure of `modelmem plan` against PyTorch eager, measured.

Two jobs, run with the project environment (.venv: torch 2.x, torchvision, onnx):

  eager_trace.py list
      prints every classification model of torchvision.models, fewest parameters first (from
      the weights' metadata; a model without it goes last).

  eager_trace.py params MODEL
      prints the model's parameter count (from the weights' metadata, else by building it).

  eager_trace.py export MODEL OUT.onnx [SIZE]
      exports torchvision's MODEL (random weights, eval mode, opset 13, batch a symbolic dim
      `batch`) to a graph-only ONNX file (weights keep name, dims and type, not their data).
      A model over protobuf's 2 GiB is exported with external data in a scratch folder and
      its weights' data dropped the same way. aten::zero, which torch.onnx 1.13 cannot export
      (Swin-V2's qkv bias), is exported as a multiplication by 0.

  eager_trace.py infer MODEL BATCH [SIZE]
      builds the same model and runs two warm-up inferences and one measured inference under
      torch.inference_mode() on one thread. The measured one is framed by two marker requests
      of MARK_BYTES (a size nothing else asks for), which the trace shows as alloc/free pairs.
      Run it under `modelmem run --trace T.csv --conf preload_threshold_kb:1,...` with
      MKL_DISABLE_FAST_MM set empty (MKL then keeps its GEMM buffers in its own cache, warm
      after the warm-ups: the measured inference holds PyTorch's tensors only).

  eager_trace.py measure T.csv BATCH [SIZE]
      prints the peak live bytes between the two markers above the live bytes at the first
      one, plus the input tensor (which the plan counts as an activation and the program
      allocated before the first marker): the activation peak of one eager inference.

  eager_trace.py peak T.csv
      the live set at that peak, for comparing it with `modelmem plan --runtime eager
      --show-live N`: each allocation made since the first marker and live at the peak, in the
      order made, with its size and its index among those allocations.

SIZE is the input's height and width (224 unless given). MODEL may also be `bert_base`, the
BERT-base encoder of models/make_models.py (models/bert_base.onnx): its input is BATCH x SIZE
token ids (SIZE is the sequence length there), and `measure` then takes the model's name after
SIZE to count that input (`measure T.csv BATCH SIZE bert_base`).
"""
import csv
import sys

MARK_BYTES = 7_340_033  # odd, prime-sized: no tensor of these models has this size


def build(name):
    if name == "bert_base":
        import os

        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "models"))
        import make_models

        return make_models.BertEncoder().eval()
    import torchvision

    return getattr(torchvision.models, name)(weights=None).eval()


def example(name, batch, size):
    """The model's input: token ids for bert_base, else a batch of size x size RGB images."""
    import torch

    if name == "bert_base":
        return torch.randint(0, 30522, (batch, size))
    return torch.randn(batch, 3, size, size)


def input_bytes(name, batch, size):
    return batch * size * 8 if name == "bert_base" else batch * 3 * size * size * 4


def list_models():
    import torchvision

    def params(name):
        try:
            return torchvision.models.get_model_weights(name).DEFAULT.meta["num_params"]
        except Exception:  # no weights or no metadata
            return float("inf")

    for name in sorted(torchvision.models.list_models(module=torchvision.models),
                       key=lambda n: (params(n), n)):
        print(name)


def params(name):
    import torchvision

    try:
        print(torchvision.models.get_model_weights(name).DEFAULT.meta["num_params"])
    except Exception:  # no weights or no metadata
        print(sum(p.numel() for p in build(name).parameters()))


def export(name, out, size):
    import os
    import tempfile

    import onnx
    import torch

    # torch.onnx 1.13 has no symbolic for aten::zero at any opset: Swin-V2 zeroes the middle
    # third of a copy of its qkv bias (`qkv_bias[length:2 * length].zero_()`, a weight-sized
    # tensor). Exported as x * 0, which is what it computes for finite weights.
    def zero(g, self):
        return g.op("Mul", self, g.op("Constant", value_t=torch.tensor(0.0)))

    torch.onnx.register_custom_op_symbolic("aten::zero", zero, 13)
    # nn.MultiheadAttention's inference fast path (aten::_native_multi_head_attention, taken in
    # eval mode without grad) has no ONNX symbolic: ViT exports with it off, as its written-out
    # attention. The inference (infer) keeps PyTorch's default, the fast path the user runs.
    torch.backends.mha.set_fastpath_enabled(False)
    torch.manual_seed(0)
    model = build(name)
    x = torch.randn(1, 3, size, size)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out))) as scratch:
        raw = os.path.join(scratch, "model.onnx")
        # Opset 13 as before; a model whose attention is F.scaled_dot_product_attention (ViT)
        # needs 14, where torch.onnx writes it out as MatMul, Softmax, MatMul.
        for opset in (13, 14):
            try:
                torch.onnx.export(model, x, raw, opset_version=opset, input_names=["input"],
                                  output_names=["output"],
                                  dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                                  do_constant_folding=True, dynamo=False)
                break
            except torch.onnx.errors.UnsupportedOperatorError:
                if opset == 14:
                    raise
        del model
        m = onnx.load(raw, load_external_data=False)
        for init in m.graph.initializer:
            if init.data_location == onnx.TensorProto.EXTERNAL:
                if init.data_type == onnx.TensorProto.INT64:
                    onnx.external_data_helper.load_external_data_for_tensor(init, scratch)
                init.ClearField("external_data")
                init.data_location = onnx.TensorProto.DEFAULT
            if init.data_type == onnx.TensorProto.INT64 and len(init.raw_data) <= 1024:
                continue  # reshape targets and axes: shape inference reads them
            for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
                init.ClearField(field)
        onnx.save(m, out)


def infer(name, batch, size):
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build(name)
    x = example(name, batch, size)
    with torch.inference_mode():
        for _ in range(2):
            model(x)
        mark = torch.empty(MARK_BYTES, dtype=torch.uint8)
        del mark
        y = model(x)
        del y
        mark = torch.empty(MARK_BYTES, dtype=torch.uint8)
        del mark


def replay(path):
    """Yields (index, event, address, bytes) of the requests between the two markers."""
    marks = 0
    index = 0
    with open(path, newline="") as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            event = row["event"]
            if event not in ("alloc", "free"):
                continue
            if event == "alloc" and int(row["size"]) == MARK_BYTES:
                marks += 1
                if marks == 2:
                    return
                continue
            if marks == 1:
                yield index, event, row["address"], int(row["size"])
                index += 1
    sys.exit(f"{path}: the two marker requests of {MARK_BYTES} bytes are not in the trace")


def peak(path):
    live, current, best, best_set = {}, 0, -1, {}
    for index, event, address, nbytes in replay(path):
        if event == "alloc":
            live[address] = (index, nbytes)
            current += nbytes
            if current > best:
                best, best_set = current, dict(live)
        elif address in live:
            current -= live.pop(address)[1]
    print(f"peak {best} B above the first marker, {len(best_set)} allocations live")
    for index, nbytes in sorted(best_set.values()):
        print(f"  #{index:<6} {nbytes:>14,} B")


def measure(path, batch, size, name="", case=0):
    """`case`: which pair of markers frames the inference (0: the first)."""
    live = {}
    current = 0
    marks = -2 * case
    baseline = peak = None
    with open(path, newline="") as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            event = row["event"]
            if event == "alloc":
                nbytes = int(row["size"])
                if nbytes == MARK_BYTES:
                    marks += 1
                    if marks == 1:
                        baseline = peak = current
                    elif marks == 2:
                        break
                    continue
                live[row["address"]] = nbytes
                current += nbytes
                if marks == 1:
                    peak = max(peak, current)
            elif event == "free":
                current -= live.pop(row["address"], 0)
    if marks < 2:
        sys.exit(f"{path}: the two marker requests of {MARK_BYTES} bytes are not in the trace")
    print(peak - baseline + input_bytes(name, batch, size))


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["list"]:
        list_models()
    elif len(args) == 2 and args[0] == "params":
        params(args[1])
    elif len(args) >= 3 and args[0] == "export":
        export(args[1], args[2], int(args[3]) if len(args) > 3 else 224)
    elif len(args) >= 3 and args[0] == "infer":
        infer(args[1], int(args[2]), int(args[3]) if len(args) > 3 else 224)
    elif len(args) == 2 and args[0] == "peak":
        peak(args[1])
    elif len(args) >= 3 and args[0] == "measure":
        measure(args[1], int(args[2]), int(args[3]) if len(args) > 3 else 224,
                args[4] if len(args) > 4 else "")
    else:
        sys.exit(__doc__)
