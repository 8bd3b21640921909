#!/usr/bin/python3
"""Writes a TorchScript ResNet-50 (torchvision, random weights, nothing downloaded).
Usage: /usr/bin/python3 make_resnet50.py OUT.pt"""
import sys

import torch
import torchvision

torch.manual_seed(0)
model = torchvision.models.resnet50(weights=None).eval()
with torch.no_grad():
    traced = torch.jit.trace(model, torch.randn(1, 3, 224, 224))
traced.save(sys.argv[1])
print(f"wrote {sys.argv[1]}")
