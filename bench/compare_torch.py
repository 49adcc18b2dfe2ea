#!/usr/bin/python3
"""PyTorch's side of the CPU-speed comparison (docs/benchmarks.md).

The models of `paralab bench --models-only` (bench/model_bench.h), with the same batch,
optimizer (SGD lr 0.01, momentum 0.9; gpt-char: AdamW lr 1e-3, weight decay 0.01) and thread
count, on synthetic tensors of the same shapes and the same threads (torch's intra-op threads
and OpenBLAS's pool, which torch.set_num_threads does not set); the optimizer step is in the
step time, warm-up steps are left out, and each case runs in `--rounds` rounds round-robin with
the fastest kept. Prints samples/s and ms/step (median of the timed steps) per model and thread
count (gpt-char also tokens/s, 64 a sample), and which BLAS kernel ran. The mlp-ddp2 rows run
the MLP under DistributedDataParallel in 2 processes (gloo over the loopback, 1 thread each), as
paralab's ddp rows run it on 2 devices.

Run with Debian's python3-torch (1.13, CPU). OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, where the
machine sets them, change OpenBLAS's kernel choice; docs/benchmarks.md says which were used:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/compare_torch.py
"""
import argparse
import ctypes
import ctypes.util
import json
import math
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from llama_torch import LLAMA_T, MOE_CHAR, CharLlama

# model -> (batch, steps, warm-up), as in bench/model_bench.cpp
CASES = {
    "mlp": (128, 80, 8),
    "lenet": (64, 30, 4),
    "lstm": (64, 24, 3),
    "gpt-char": (12, 40, 5),
    "llama-char": (12, 40, 5),
    "moe-char": (16, 40, 5),
}
# The ddp rows: the MLP under torch's DistributedDataParallel in 2 processes (gloo over the
# loopback, 1 thread each), global batch -> (steps, warm-up), as paralab's mlp-ddp2 rows.
DDP_CASES = {
    "mlp-ddp2": (128, 80, 8),
    "mlp-ddp2-b256": (256, 80, 8),
}
DDP_WORLD = 2


class LastStep(nn.Module):
    """LSTM 32 -> 128 over 50 steps, linear 10 on the last step's output."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(input_size=32, hidden_size=128, num_layers=1, batch_first=True)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):  # x is (B, T=50, F=32); out is (B, 10)
        y, _ = self.lstm(x)
        return self.fc(y[:, -1, :])


# resources/examples/gpt-char.paralab.json: nanoGPT's "baby GPT" on byte tokens.
GPT_T, GPT_VOCAB, GPT_D, GPT_HEADS, GPT_FFN, GPT_LAYERS = 64, 256, 128, 4, 512, 4


class CausalSelfAttention(nn.Module):
    """nanoGPT's CausalSelfAttention without dropout, on its fallback path (torch 1.13 has no
    scaled_dot_product_attention): one Linear(D, 3D) -> q|k|v, per head a masked softmax."""

    def __init__(self, d, heads, t):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

    def forward(self, x):  # x is (B, T, D); out is (B, T, D)
        B, T, D = x.size()
        q, k, v = self.c_attn(x).split(D, dim=2)
        # each (B, H, T, Dh)
        q = q.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, H, T, T)
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, D)
        return self.c_proj(y)


class Block(nn.Module):
    """The pre-LayerNorm GPT block: x + attn(ln_1(x)), then x + fc2(gelu(fc1(ln_2(x))))."""

    def __init__(self, d, heads, ffn, t):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, t)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d))

    def forward(self, x):  # x is (B, T, D); out is (B, T, D)
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class CharGPT(nn.Module):
    """Token and learned position embeddings, GPT_LAYERS blocks, a final LayerNorm and
    Linear(D, vocab), every module with PyTorch's default initialisation (as ParaLab's)."""

    def __init__(self, t=GPT_T, vocab=GPT_VOCAB, d=GPT_D, heads=GPT_HEADS, ffn=GPT_FFN, layers=GPT_LAYERS):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(t, d)
        self.blocks = nn.Sequential(*[Block(d, heads, ffn, t) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab)

    def forward(self, idx):  # idx is (B, T) byte ids; out is (B, T, vocab) logits
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        return self.lm_head(self.ln_f(self.blocks(x)))


def is_token_model(model):
    return model in ("gpt-char", "llama-char", "moe-char")


def make_optimizer(model, params):
    if is_token_model(model):
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def make(model):
    """(module, input shape per sample)"""
    if model == "mlp":
        return (nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10)), (784,))
    if model == "lenet":
        return (nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(32 * 7 * 7, 10)), (1, 28, 28))
    if model == "lstm":
        return LastStep(), (50, 32)
    if model == "gpt-char":
        return CharGPT(), (GPT_T,)
    if model == "llama-char":
        return CharLlama(), (LLAMA_T,)
    if model == "moe-char":  # dropless, without the auxiliary loss ParaLab also computes
        return CharLlama(**MOE_CHAR), (LLAMA_T,)
    raise ValueError(model)


def openblas():
    """The OpenBLAS that torch calls (the same library file, so the same instance)."""
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas") or ""):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return lib
        except (OSError, AttributeError):
            continue
    return None


def set_threads(threads):
    """Same threads as ParaLab: torch's intra-op threads AND OpenBLAS's. torch.set_num_threads
    leaves OpenBLAS's own pool (all cores by default) alone, so a "1-thread" torch run would
    otherwise do its GEMMs on 2 cores."""
    torch.set_num_threads(threads)
    lib = openblas()
    if lib is not None:
        lib.openblas_set_num_threads(threads)
        return lib.openblas_get_num_threads()
    return None


def scaled(steps, warmup, scale):
    steps = max(2, round(steps * scale))
    return steps, min(max(1, round(warmup * scale)), steps - 1)


def synthetic_batch(model, shape, batch):
    """(inputs, targets): random inputs and class ids, or for a token model windows of T + 1
    random bytes (the inputs the first T, the targets the last T)."""
    if is_token_model(model):
        w = torch.randint(0, GPT_VOCAB, (batch, shape[0] + 1))
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()
    return torch.randn(batch, *shape), torch.randint(0, 10, (batch,))


def train_timed(model, net, shape, batch, steps, warmup, at_start=None):
    """The model's optimizer on fresh synthetic batches; (start, [end of each timed step])."""
    opt = make_optimizer(model, net.parameters())
    loss_fn = nn.CrossEntropyLoss()  # over every position for a token model
    # A fresh batch per step, made before timing (paralab's batches come from its loader).
    xs, ys = zip(*[synthetic_batch(model, shape, batch) for _ in range(min(steps, 8))])
    ends = []
    start = None
    for step in range(steps):
        if step == warmup:
            if at_start is not None:
                at_start()
            start = time.perf_counter()
        x, y = xs[step % len(xs)], ys[step % len(ys)]
        opt.zero_grad(set_to_none=True)
        out = net(x)
        loss = loss_fn(out.reshape(-1, out.size(-1)), y.reshape(-1))
        loss.backward()  # under DDP, with the gradients' all-reduce in its buckets
        opt.step()
        if step >= warmup:
            ends.append(time.perf_counter())
    return start, ends


def row(model, threads, batch, steps, warmup, start, ends, wall, blas_threads):
    per_step = [b - a for a, b in zip([start] + ends[:-1], ends)]
    timed = steps - warmup
    r = {"model": model, "threads": threads, "batch": batch, "steps": timed, "warmup": warmup,
         "ms_per_step": 1e3 * statistics.median(per_step), "samples_per_s": timed * batch / wall,
         "openblas_threads": blas_threads}
    if is_token_model(model):
        r["tokens_per_s"] = r["samples_per_s"] * GPT_T
    return r


def run_case(model, threads, scale):
    blas_threads = set_threads(threads)
    torch.manual_seed(0)
    batch, steps, warmup = CASES[model]
    steps, warmup = scaled(steps, warmup, scale)
    net, shape = make(model)
    start, ends = train_timed(model, net, shape, batch, steps, warmup)
    return row(model, threads, batch, steps, warmup, start, ends, ends[-1] - start, blas_threads)


def _ddp_worker(rank, model, scale, port, results):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    blas_threads = set_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=DDP_WORLD)
    torch.manual_seed(0)
    global_batch, steps, warmup = DDP_CASES[model]
    steps, warmup = scaled(steps, warmup, scale)
    net, shape = make("mlp")
    net = DistributedDataParallel(net)  # broadcasts rank 0's parameters
    start, ends = train_timed("mlp", net, shape, global_batch // DDP_WORLD, steps, warmup, at_start=dist.barrier)
    dist.barrier()
    wall = time.perf_counter() - start
    dist.destroy_process_group()
    if rank == 0:
        results.put({**row(model, 1, global_batch, steps, warmup, start, ends, wall, blas_threads),
                     "processes": DDP_WORLD})


def run_ddp_case(model, scale):
    """The MLP under DistributedDataParallel: DDP_WORLD processes, 1 thread each."""
    import socket
    import torch.multiprocessing as mp

    with socket.socket() as sock:  # a free port on the loopback for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(_ddp_worker, args=(model, scale, port, results), nprocs=DDP_WORLD,
                       start_method="spawn")
    return results.get()


def openblas_core():
    lib = openblas()
    if lib is None:
        return "unknown"
    return f"{lib.openblas_get_corename().decode()} ({lib.openblas_get_config().decode()})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the step counts")
    ap.add_argument("--models", default="mlp,lenet,lstm,gpt-char,llama-char,moe-char,mlp-ddp2,mlp-ddp2-b256")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    models = a.models.split(",")
    best = {}
    for _ in range(max(1, a.rounds)):
        for m in models:
            for t in [1] if m in DDP_CASES else threads:
                r = run_ddp_case(m, a.scale) if m in DDP_CASES else run_case(m, t, a.scale)
                key = (m, t)
                best.setdefault(key, {**r, "rounds": []})
                best[key]["rounds"].append(r["samples_per_s"])
                if r["samples_per_s"] > best[key]["samples_per_s"]:
                    best[key].update(r)
    rows = [best[(m, t)] for m in models for t in ([1] if m in DDP_CASES else threads)]
    info = {"torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
            "openblas_core": openblas_core(),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
            "mkldnn": torch.backends.mkldnn.is_available(), "rounds": a.rounds}
    if a.json:
        print(json.dumps({"info": info, "models": rows}))
        return
    print(f"PyTorch {info['torch']}, OpenBLAS kernel {info['openblas_core']}, "
          f"OPENBLAS_CORETYPE={info['OPENBLAS_CORETYPE']} OPENBLAS_L2_SIZE={info['OPENBLAS_L2_SIZE']}, "
          f"mkldnn {info['mkldnn']}; fastest of {a.rounds} round(s)\n")
    print(f"{'model':13} {'threads':>7} {'blas':>4} {'batch':>5} {'steps':>6} {'ms/step':>8} {'samples/s':>10} {'tokens/s':>9}")
    print("-" * 70)
    for r in rows:
        tokens = f"{r['tokens_per_s']:.0f}" if "tokens_per_s" in r else "-"
        print(f"{r['model']:13} {r['threads']:>7} {str(r['openblas_threads']):>4} {r['batch']:>5} {str(r['steps']) + '+' + str(r['warmup']):>6} "
              f"{r['ms_per_step']:>8.2f} {r['samples_per_s']:>10.0f} {tokens:>9}")
    if any(m in DDP_CASES for m in models):
        print(f"\nmlp-ddp2 rows: DistributedDataParallel, {DDP_WORLD} processes (gloo) of 1 thread; "
              "batch is the global batch, split over the processes")


if __name__ == "__main__":
    main()
