#!/usr/bin/python3
"""Convergence of the char-GPT and char-Llama examples against PyTorch (docs/benchmarks.md).

Trains resources/examples/<--model>.paralab.json for `--steps` steps with `paralab run` and the
same model in PyTorch (gpt-char: bench/compare_torch.py's CharGPT, nanoGPT's block; llama-char:
bench/llama_torch.py's CharLlama; PyTorch's default initialisation, AdamW lr 1e-3 and weight
decay 0.01 on every parameter, batch 12, T 64), for each of `--seeds`, on the same data by
ParaLab's rule (engine/data/text.cpp):

  corpus      a file as it is; a folder: its regular files (symlinks and sub-folders left out) in
              byte order of their names, concatenated, each file that holds a NUL byte skipped
              (the fortune .dat indexes)
  splits      the last round(bytes * 0.1) bytes (half away from zero) validate, the rest trains
  training    each example a window of T + 1 bytes at a uniformly random start in the training
              split: the inputs the first T, the targets the last T
  validation  consecutive, non-overlapping windows from the start of the validation split
              (window i starts at i * T), (bytes - 1) // T of them, the first `--test-limit`;
              the loss is the mean cross-entropy over every position of every window

Only the evaluation at the end is run. Prints each seed's validation loss, both ranges, and
the difference of the means (the goal: ParaLab within 0.05 of PyTorch). The two sides run
side by side (`--threads` each; 1 + 1 fits two cores), unless --sequential.

    /usr/bin/python3 bench/compare_gpt_loss.py --paralab build-bench/app/paralab
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.nn.functional as F

from compare_torch import GPT_T, CharGPT, set_threads
from llama_torch import CharLlama

MODELS = {"gpt-char": CharGPT, "llama-char": CharLlama}

BATCH = 12
VAL_FRACTION = 0.1
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "resources", "examples")


def read_corpus(path):
    """The corpus bytes by engine/data/text.cpp's rule (see the module's docstring)."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return f.read()
    entries = [e for e in os.scandir(path) if e.is_file(follow_symlinks=False)]
    entries.sort(key=lambda e: os.fsencode(e.name))
    parts = []
    for e in entries:
        with open(e.path, "rb") as f:
            data = f.read()
        if b"\0" not in data:
            parts.append(data)
    return b"".join(parts)


def split_bytes(total):
    """(train, test) byte counts: std::llround(total * 0.1) validates."""
    x = total * VAL_FRACTION
    test = int(x + 0.5)  # x >= 0: half away from zero, as llround
    return total - test, test


def validation_windows(data, train, test_limit):
    """(inputs, targets), each (N, T): consecutive windows from the validation split's start."""
    test = len(data) - train
    n = min((test - 1) // GPT_T, test_limit)
    v = torch.frombuffer(bytearray(data[train:train + n * GPT_T + 1]), dtype=torch.uint8).long()
    starts = torch.arange(n) * GPT_T
    idx = starts[:, None] + torch.arange(GPT_T + 1)[None, :]
    w = v[idx]
    return w[:, :-1], w[:, 1:]


def torch_run(model, data, train, seed, steps, test_limit):
    """Trains the model for `steps` steps on random training windows; the validation loss."""
    torch.manual_seed(seed)
    net = MODELS[model]()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    tokens = torch.frombuffer(bytearray(data[:train]), dtype=torch.uint8).long()
    offsets = torch.arange(GPT_T + 1)[None, :]
    net.train()
    t0 = time.perf_counter()
    last = []
    for step in range(steps):
        # starts 0 .. train - T - 1: the last window ends at the split's last byte
        starts = torch.randint(0, train - GPT_T, (BATCH,))
        w = tokens[starts[:, None] + offsets]
        x, y = w[:, :-1], w[:, 1:]
        logits = net(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last.append(loss.item())
    wall = time.perf_counter() - t0
    net.eval()
    vx, vy = validation_windows(data, train, test_limit)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, vx.size(0), BATCH):
            logits = net(vx[i:i + BATCH])
            y = vy[i:i + BATCH]
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum").item()
            count += y.numel()
    return {"seed": seed, "test_loss": total / count, "final_loss": last[-1], "wall_s": wall,
            "validation_windows": vx.size(0)}


def paralab_run(binary, example, corpus, seed, steps, test_limit, threads, folder):
    """`paralab run` on a copy of the example: the seed, `steps` steps, evaluation at the end."""
    with open(example) as f:
        e = json.load(f)
    e["seed"] = seed
    e["data"]["path"] = corpus
    e["data"]["test_limit"] = test_limit
    e["train"] = {"epochs": 1, "max_steps": steps, "eval_every": 0}
    file = os.path.join(folder, f"{os.path.basename(example).split('.')[0]}-{seed}.paralab.json")
    with open(file, "w") as f:
        json.dump(e, f)
    db = os.path.join(folder, "runs.db")
    out = subprocess.run([binary, "run", file, "--json", "--threads", str(threads), "--db", db],
                         capture_output=True, text=True, check=False)
    summary = next((json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")), None)
    if out.returncode != 0 or summary is None or summary.get("status") != "finished":
        raise RuntimeError(f"paralab run (seed {seed}) failed ({out.returncode}): {out.stderr[-2000:]}")
    return {"seed": seed, "test_loss": summary["test_loss"], "final_loss": summary["final_loss"],
            "wall_s": summary["wall_s"], "steps": summary["steps"]}


def describe(name, rows):
    losses = [r["test_loss"] for r in rows]
    each = ", ".join(f"{r['seed']}: {r['test_loss']:.4f}" for r in rows)
    print(f"{name:8} validation loss {min(losses):.4f} - {max(losses):.4f}, mean {statistics.mean(losses):.4f}"
          f"  ({each}; {statistics.mean(r['wall_s'] for r in rows):.0f} s a run)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paralab", default=os.path.join(HERE, "..", "build-bench", "app", "paralab"))
    ap.add_argument("--model", choices=sorted(MODELS), default="gpt-char")
    ap.add_argument("--corpus", default="/usr/share/games/fortunes")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seeds", default="1337,1338,1339")
    ap.add_argument("--test-limit", type=int, default=240)
    ap.add_argument("--threads", type=int, default=1, help="compute threads of each side")
    ap.add_argument("--only", choices=["torch", "paralab"], help="run one side only")
    ap.add_argument("--sequential", action="store_true", help="one side after the other")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    example = os.path.join(EXAMPLES, f"{a.model}.paralab.json")

    data = read_corpus(a.corpus)
    train, test = split_bytes(len(data))
    print(f"corpus {a.corpus}: {len(data)} bytes, {train} train, {test} validation; "
          f"{a.steps} steps, batch {BATCH}, T {GPT_T}, seeds {seeds}", file=sys.stderr)

    results = {"torch": [], "paralab": []}
    errors = []

    def run_paralab():
        try:
            with tempfile.TemporaryDirectory(prefix="paralab-gpt-loss-") as folder:
                for s in seeds:
                    r = paralab_run(a.paralab, example, a.corpus, s, a.steps, a.test_limit, a.threads, folder)
                    print(f"paralab seed {s}: validation loss {r['test_loss']:.4f}", file=sys.stderr)
                    results["paralab"].append(r)
        except Exception as err:  # reported after the PyTorch side
            errors.append(err)

    side = None
    if a.only != "torch":
        side = threading.Thread(target=run_paralab)
        side.start()
        if a.sequential:
            side.join()
    if a.only != "paralab":
        set_threads(a.threads)
        for s in seeds:
            r = torch_run(a.model, data, train, s, a.steps, a.test_limit)
            print(f"torch   seed {s}: validation loss {r['test_loss']:.4f}", file=sys.stderr)
            results["torch"].append(r)
    if side is not None:
        side.join()
    if errors:
        raise errors[0]

    if a.json:
        print(json.dumps({"steps": a.steps, "test_limit": a.test_limit, "corpus_bytes": len(data),
                          "train_bytes": train, "validation_bytes": test, **results}))
        return
    for name in ("torch", "paralab"):
        if results[name]:
            describe(name, results[name])
    if results["torch"] and results["paralab"]:
        diff = (statistics.mean(r["test_loss"] for r in results["paralab"]) -
                statistics.mean(r["test_loss"] for r in results["torch"]))
        print(f"paralab - torch (means): {diff:+.4f} (goal: within 0.05: {'met' if abs(diff) <= 0.05 else 'missed'})")


if __name__ == "__main__":
    main()
