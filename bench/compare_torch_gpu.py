#!/usr/bin/env python3
"""PyTorch 2 eager's side of the GPU-speed comparison (docs/benchmarks.md).

The models of `paralab bench --models-only` (bench/model_bench.h; the same as
bench/compare_torch.py), trained on one CUDA GPU on synthetic tensors of the same shapes,
with the same optimizer (SGD lr 0.01, momentum 0.9; the GPTs AdamW lr 1e-3), and a
GPT-2-small-like model (bench/gpu/gpt2-small.paralab.json: 12 blocks, D 768, 12 heads, ffn 3072,
T 256, batch 8, byte tokens). The GPTs' attention is torch's scaled_dot_product_attention
(causal; flash or memory-efficient kernels where torch picks them). Each step is zero_grad, forward,
cross-entropy, backward, optimizer step, and `loss.item()` (ParaLab's trainer reads each step's
loss, which waits for the step). Modes:

  fp32    eager, TF32 off for matmuls and cuDNN (cuDNN's convolutions allow TF32 by default)
  tf32    eager, TF32 on for both
  bf16    eager under torch.autocast(bfloat16), fp32 master weights
  graph   the whole step captured once in a CUDA graph and replayed (fp32), the PyTorch form
          of the stretch goal; loss read every step as above

Per case: warm-up steps, then `--steps` timed steps in each of `--rounds` rounds; prints the
median round's ms/step and samples/s. Run where PyTorch sees the GPU:

    python3 bench/compare_torch_gpu.py [--models mlp,lenet,lstm,gpt-char,gpt2-small] [--batches 128,1024] [--json FILE]
"""
import argparse
import json
import statistics
import time

import torch
from torch import nn

# The same models as the CPU comparison (this folder's compare_torch.py).
import torch.nn.functional as F
from compare_torch import CausalSelfAttention, CharGPT, make

# model -> default batch: bench/model_bench.cpp's, and bench/gpu/gpt2-small.paralab.json's
BATCH = {"mlp": 128, "lenet": 64, "lstm": 64, "gpt-char": 12, "gpt2-small": 8}
# The token models: (T, D, heads, ffn, blocks) over 256 byte tokens
GPT = {"gpt-char": (64, 128, 4, 512, 4), "gpt2-small": (256, 768, 12, 3072, 12)}


class SdpaAttention(CausalSelfAttention):
    """compare_torch's attention through torch's fused scaled_dot_product_attention."""

    def forward(self, x):
        B, T, D = x.size()
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, D))


def make_gpu(model):
    """(module, input shape per sample, is a token model)"""
    if model in GPT:
        t, d, heads, ffn, blocks = GPT[model]
        net = CharGPT(t=t, d=d, heads=heads, ffn=ffn, layers=blocks)
        for block in net.blocks:
            block.attn.__class__ = SdpaAttention
        return net, (t,), True
    net, shape = make(model)
    return net, shape, False


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def run_case(model, batch, mode, steps, rounds, warmup):
    set_tf32(mode == "tf32")
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    dev = torch.device("cuda")
    net, shape, tokens = make_gpu(model)
    net = net.to(dev)
    if tokens:  # AdamW as the char-GPT example; every position's next byte is a target
        # a step captured in a CUDA graph needs AdamW's step count on the GPU (capturable)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01, capturable=mode == "graph")
        xs = [torch.randint(0, 256, (batch, *shape), device=dev) for _ in range(8)]
        ys = [torch.randint(0, 256, (batch, *shape), device=dev) for _ in range(8)]

        def loss_fn(logits, y):
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    else:
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
        xs = [torch.randn(batch, *shape, device=dev) for _ in range(8)]
        ys = [torch.randint(0, 10, (batch,), device=dev) for _ in range(8)]

    if mode == "graph":
        # Static input buffers; capture after warm-up on a side stream (PyTorch's recipe).
        sx, sy = xs[0].clone(), ys[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                loss_fn(net(sx), sy).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            sloss = loss_fn(net(sx), sy)
            sloss.backward()
            opt.step()

        def step(i):
            sx.copy_(xs[i % 8])
            sy.copy_(ys[i % 8])
            graph.replay()
            return sloss.item()
    else:
        amp = mode == "bf16"

        def step(i):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = loss_fn(net(xs[i % 8]), ys[i % 8])
            loss.backward()
            opt.step()
            return loss.item()

    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    per_round = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for i in range(steps):
            last = step(i)
        torch.cuda.synchronize()
        per_round.append((time.perf_counter() - t0) / steps)
    ms = 1e3 * statistics.median(per_round)
    return {"model": model, "batch": batch, "mode": mode, "steps": steps, "rounds": rounds,
            "ms_per_step": ms, "peak_memory_bytes": torch.cuda.max_memory_allocated(), "samples_per_s": batch / (ms / 1e3),
            "ms_rounds": [1e3 * r for r in per_round], "last_loss": last}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,lenet,lstm")
    ap.add_argument("--modes", default="fp32,tf32,bf16,graph")
    ap.add_argument("--batches", default="", help="comma list; default: each model's own")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", default="", help="also write the rows to this file")
    a = ap.parse_args()
    rows = []
    for m in a.models.split(","):
        batches = [int(b) for b in a.batches.split(",")] if a.batches else [BATCH[m]]
        for b in batches:
            for mode in a.modes.split(","):
                try:
                    rows.append(run_case(m, b, mode, a.steps, a.rounds, a.warmup))
                except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # the row says why
                    print(f"{m} batch {b} {mode}: {e}", flush=True)
    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(0)}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"info": info, "rows": rows}, f, indent=1)
    print(f"PyTorch {info['torch']} (CUDA {info['cuda']}, cuDNN {info['cudnn']}) on {info['gpu']}; "
          f"median of {a.rounds} rounds of {a.steps} steps\n")
    print(f"{'model':10} {'batch':>6} {'mode':>6} {'ms/step':>8} {'samples/s':>11} {'peak MiB':>9}")
    for r in rows:
        print(f"{r['model']:10} {r['batch']:>6} {r['mode']:>6} {r['ms_per_step']:>8.3f} "
              f"{r['samples_per_s']:>11.0f} {r['peak_memory_bytes'] / 2**20:>9.1f}")


if __name__ == "__main__":
    main()
