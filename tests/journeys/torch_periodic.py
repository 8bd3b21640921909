# A periodic workload: inference of a small convolutional network at batch 8, repeated. Every
# inference makes the same requests in the same order (what the planned arena plans).
import sys

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
inferences = int(sys.argv[1]) if len(sys.argv) > 1 else 30
net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
    torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
x = torch.randn(8, 3, 64, 64)
total = 0.0
with torch.no_grad():
    for _ in range(inferences):
        total += float(net(x).sum())
print(f"checksum {total:.6e}")
