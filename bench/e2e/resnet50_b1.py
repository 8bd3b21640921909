# ResNet-50 (torchvision, random weights) inference at batch 1, N times (default 20), one thread.
# Prints the checksum of the outputs so that runs can be compared.
import sys

import torch
import torchvision

torch.manual_seed(0)
torch.set_num_threads(1)
inferences = int(sys.argv[1]) if len(sys.argv) > 1 else 20
model = torchvision.models.resnet50(weights=None).eval()
x = torch.randn(1, 3, 224, 224)
total = 0.0
with torch.no_grad():
    for _ in range(inferences):
        total += float(model(x).sum())
print(f"checksum {total:.6e}")
