#!/usr/bin/env python3
"""A few CPU training steps (forward, backward, optimiser step) of one model, for recording an
allocation trace under `modelmem run --trace`. Each step is framed by two allocations of a
sentinel size (SENTINEL bytes, through the C library's malloc, so the preload sees them) that
bench/planner/make_instances.py uses to find the steps in the trace and then drops.

  train_step.py resnet50|bert|gpt2 [--batch B] [--seq S] [--steps N]
"""
import argparse
import ctypes
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SENTINEL = 3 * (1 << 20) + 17  # an odd size no tensor has


class Block(nn.Module):
    """A pre-norm transformer block (GPT-2 layout when causal, BERT's when not)."""

    def __init__(self, d, heads, causal):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads, self.causal = heads, causal

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (y.view(shape).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq, causal):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, causal) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["resnet50", "bert", "gpt2"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    if args.model == "resnet50":
        import torchvision
        model = torchvision.models.resnet50()
        inputs = lambda: torch.randn(args.batch, 3, 224, 224)
        targets = lambda: torch.randint(0, 1000, (args.batch,))
        loss_of = lambda out, y: F.cross_entropy(out, y)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        if args.model == "bert":  # BERT-base: 12 layers, hidden 768, 12 heads
            vocab, d, layers, heads, causal = 30522, 768, 12, 12, False
        else:  # GPT-2-style decoder, 16 layers, hidden 1024: about 300 M parameters (untied head)
            vocab, d, layers, heads, causal = 50257, 1024, 16, 16, True
        model = Transformer(vocab, d, layers, heads, args.seq, causal)
        inputs = lambda: torch.randint(0, vocab, (args.batch, args.seq))
        targets = lambda: torch.randint(0, vocab, (args.batch * args.seq,))
        loss_of = lambda out, y: F.cross_entropy(out.view(-1, out.shape[-1]), y)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    print(args.model, sum(p.numel() for p in model.parameters()), "parameters", flush=True)
    for step in range(args.steps):
        x, y = inputs(), targets()
        mark = libc.malloc(SENTINEL)
        libc.free(mark)
        opt.zero_grad()
        loss = loss_of(model(x), y)
        loss.backward()
        opt.step()
        del loss
        mark = libc.malloc(SENTINEL)
        libc.free(mark)
        print("step", step, "done", flush=True)


if __name__ == "__main__":
    main()
