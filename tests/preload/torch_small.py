"""A small PyTorch CNN run repeatedly; prints a checksum of its outputs. Used by test_preload
to compare a run under libmodelmem_preload.so with one under the C library."""
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
    torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
x = torch.randn(1, 3, 48, 48)
total = 0.0
with torch.inference_mode():
    for _ in range(150):
        total += float(model(x).double().abs().sum())
print(f"checksum {total:.6e}")
