"""One inference benchmark run: one model under one allocator, in a fresh process.

Run by bench/gpu/run_bench.py (which sets PYTORCH_CUDA_ALLOC_CONF / MODELMEM_ALLOC_CONF before
this process starts). Prints one JSON line: peak reserved, peak allocated, latency p50/p99.

  python3 infer_bench.py --model resnet50|bert --allocator native|modelmem [--lib LIB]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

# Batch sizes (ResNet-50) and sequence lengths (BERT) cycle through these: sizes that do not
# grow monotonically are what makes a caching allocator fragment.
RESNET_BATCHES = [1, 7, 16, 3, 32, 9, 24, 2, 12, 48]
BERT_SEQ_LENS = [16, 128, 64, 384, 32, 256, 512, 48, 200, 96]
BERT_BATCH = 8


# ---- ResNet-50 in plain torch (torchvision may be missing) ----
class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + idt)


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def resnet50():
    try:
        import torchvision
        return torchvision.models.resnet50(weights=None), "torchvision"
    except Exception:
        return ResNet50(), "plain torch"


class BertBase(nn.Module):
    """A BERT-base-sized encoder: 12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(30522, 768)
        self.pos = nn.Embedding(512, 768)
        self.norm = nn.LayerNorm(768)
        layer = nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.encoder(self.norm(self.tok(ids) + self.pos(pos)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["resnet50", "bert"], required=True)
    ap.add_argument("--allocator", choices=["native", "modelmem"], required=True)
    ap.add_argument("--lib", default="")
    ap.add_argument("--cycles", type=int, default=12, help="timed passes over the size schedule")
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    lib = None
    if args.allocator == "modelmem":
        alloc = torch.cuda.memory.CUDAPluggableAllocator(args.lib, "modelmem_alloc", "modelmem_free")
        torch.cuda.memory.change_current_allocator(alloc)
        lib = ctypes.CDLL(args.lib)
        lib.modelmem_cuda_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong),
                                            ctypes.c_int]
        lib.modelmem_cuda_describe.restype = ctypes.c_char_p

    def peaks():
        if lib is None:
            return torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
        out = (ctypes.c_ulonglong * 6)()
        n = lib.modelmem_cuda_stats(0, out, 6)
        if n < 4:
            raise RuntimeError("modelmem_cuda_stats failed")
        return int(out[2]), int(out[3])

    torch.manual_seed(0)
    dtype = torch.float16
    if args.model == "resnet50":
        model, source = resnet50()
        schedule = RESNET_BATCHES

        def make_input(n):
            return torch.randn(n, 3, 224, 224, device="cuda", dtype=dtype)
    else:
        model, source = BertBase(), "plain torch"
        schedule = BERT_SEQ_LENS

        def make_input(n):
            return torch.randint(0, 30522, (BERT_BATCH, n), device="cuda")
    model = model.to("cuda", dtype=dtype).eval()

    lat = []
    failed = ""
    t_start = time.perf_counter()
    try:
        with torch.inference_mode():
            for cycle in range(args.cycles + 1):  # the first pass warms up (not timed)
                for n in schedule:
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    y = model(make_input(n))
                    torch.cuda.synchronize()
                    dt = time.perf_counter() - t0
                    del y
                    if cycle > 0:
                        lat.append(dt * 1e3)
    except Exception as e:  # an OOM of a too-small static pool, reported as such
        failed = str(e).splitlines()[0][:200]
    wall = time.perf_counter() - t_start
    reserved, allocated = peaks()
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(round(p * (len(lat) - 1))))] if lat else float("nan")
    result = {
        "label": args.label,
        "model": args.model,
        "model_source": source,
        "allocator": args.allocator,
        "pytorch_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "modelmem_conf": os.environ.get("MODELMEM_ALLOC_CONF", "") if lib else "",
        "describe": lib.modelmem_cuda_describe(0).decode() if lib else "",
        "iterations": len(lat),
        "peak_reserved": reserved,
        "peak_allocated": allocated,
        "ratio": reserved / allocated if allocated else float("nan"),
        "p50_ms": q(0.50),
        "p99_ms": q(0.99),
        "mean_ms": statistics.fmean(lat) if lat else float("nan"),
        "wall_s": wall,
        "error": failed,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
    }
    print("RESULT " + json.dumps(result), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
