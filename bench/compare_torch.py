#!/usr/bin/python3
"""PyTorch's side of the CPU-speed comparison (docs/benchmarks.md).

The three models of `paralab bench --models-only` (bench/model_bench.h), with the same
batch, optimizer (SGD lr 0.01, momentum 0.9) and thread count, on synthetic tensors of the
same shapes and the same threads (torch's intra-op threads and OpenBLAS's pool, which
torch.set_num_threads does not set); the optimizer step is in the step time, warm-up steps are left out, and each case
runs in `--rounds` rounds round-robin with the fastest kept. Prints samples/s and ms/step
(median of the timed steps) per model and thread count, and which BLAS kernel ran. The
mlp-ddp2 rows run the MLP under DistributedDataParallel in 2 processes (gloo over the loopback,
1 thread each), as paralab's ddp rows run it on 2 devices.

Run with Debian's python3-torch (1.13, CPU). OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, where the
machine sets them, change OpenBLAS's kernel choice; docs/benchmarks.md says which were used:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/compare_torch.py
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import platform
import statistics
import time

import torch
from torch import nn

# model -> (batch, steps, warm-up), as in bench/model_bench.cpp
CASES = {
    "mlp": (128, 80, 8),
    "lenet": (64, 30, 4),
    "lstm": (64, 24, 3),
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


def train_timed(net, shape, batch, steps, warmup, at_start=None):
    """SGD lr 0.01 momentum 0.9 on fresh synthetic batches; (start, [end of each timed step])."""
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # A fresh batch per step, made before timing (paralab's batches come from its loader).
    xs = [torch.randn(batch, *shape) for _ in range(min(steps, 8))]
    ys = [torch.randint(0, 10, (batch,)) for _ in range(len(xs))]
    ends = []
    start = None
    for step in range(steps):
        if step == warmup:
            if at_start is not None:
                at_start()
            start = time.perf_counter()
        x, y = xs[step % len(xs)], ys[step % len(ys)]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()  # under DDP, with the gradients' all-reduce in its buckets
        opt.step()
        if step >= warmup:
            ends.append(time.perf_counter())
    return start, ends


def row(model, threads, batch, steps, warmup, start, ends, wall, blas_threads):
    per_step = [b - a for a, b in zip([start] + ends[:-1], ends)]
    timed = steps - warmup
    return {"model": model, "threads": threads, "batch": batch, "steps": timed, "warmup": warmup,
            "ms_per_step": 1e3 * statistics.median(per_step), "samples_per_s": timed * batch / wall,
            "openblas_threads": blas_threads}


def run_case(model, threads, scale):
    blas_threads = set_threads(threads)
    torch.manual_seed(0)
    batch, steps, warmup = CASES[model]
    steps, warmup = scaled(steps, warmup, scale)
    net, shape = make(model)
    start, ends = train_timed(net, shape, batch, steps, warmup)
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
    start, ends = train_timed(net, shape, global_batch // DDP_WORLD, steps, warmup, at_start=dist.barrier)
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
    ap.add_argument("--models", default="mlp,lenet,lstm,mlp-ddp2,mlp-ddp2-b256")
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
    print(f"{'model':13} {'threads':>7} {'blas':>4} {'batch':>5} {'steps':>6} {'ms/step':>8} {'samples/s':>10}")
    print("-" * 60)
    for r in rows:
        print(f"{r['model']:13} {r['threads']:>7} {str(r['openblas_threads']):>4} {r['batch']:>5} {str(r['steps']) + '+' + str(r['warmup']):>6} "
              f"{r['ms_per_step']:>8.2f} {r['samples_per_s']:>10.0f}")
    if any(m in DDP_CASES for m in models):
        print(f"\nmlp-ddp2 rows: DistributedDataParallel, {DDP_WORLD} processes (gloo) of 1 thread; "
              "batch is the global batch, split over the processes")


if __name__ == "__main__":
    main()
