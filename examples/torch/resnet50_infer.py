"""ResNet-50 inference on the CPU, the way a serving loop runs it: a model built once, then the
same batch shape again and again. Run it under modelmem to serve every inference from one
pre-planned arena:  modelmem run --report -- python3 examples/torch/resnet50_infer.py"""
import sys
import time

import torch
import torchvision

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
torch.set_num_threads(2)
model = torchvision.models.resnet50().eval()  # random weights: nothing is downloaded
x = torch.randn(1, 3, 224, 224)
times = []
with torch.inference_mode():
    for _ in range(steps):
        t = time.perf_counter()
        model(x)
        times.append(time.perf_counter() - t)
times.sort()
print(f"{steps} inferences, median {times[len(times) // 2] * 1e3:.1f} ms")
