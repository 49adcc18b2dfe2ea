#!/usr/bin/python3
"""ParaLab's weights in PyTorch (docs/experiment-format.md, "Starting from weights"): for each
text example, train it a few steps with `paralab run`, write its parameters with `paralab export
--weights`, load them by name into the plain PyTorch model of the same architecture
(bench/compare_torch.py's CharGPT for gpt-char, bench/llama_torch.py's CharLlama for
llama-char, for llama-char with its output layer tied to the embedding, and for moe-char with
its mixture-of-experts MLPs), and check that
PyTorch gets

  - the validation loss ParaLab reported (`test_loss` of `paralab run --json`: the mean
    cross-entropy over the first `--test-limit` consecutive windows of the validation split),
    to within --tolerance (1e-4), and
  - the same greedy continuation of a prompt as `paralab generate --temperature 0`.

Exits 0 when every example agrees, 1 when one does not, 77 (skipped) without torch or the corpus.

    /usr/bin/python3 bench/interchange.py build/app/paralab [--examples gpt-char,llama-char,llama-char-tied,moe-char]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIPPED: this python3 has no torch (Debian's python3-torch)")
    sys.exit(77)

from compare_gpt_loss import read_corpus, split_bytes
from compare_torch import CharGPT
from llama_torch import MOE_CHAR, CharLlama, paralab_names

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "resources", "examples")
PROMPT = "The "


def gpt_names(model):
    """{ParaLab's tensor name: parameter} of CharGPT: embedding 0, positions 1, blocks 2..5,
    the final layernorm 6, the output linear 7."""
    out = {"layers.0.weight": model.wte.weight, "layers.1.weight": model.wpe.weight}
    for b, block in enumerate(model.blocks):
        p = f"layers.{2 + b}."
        parts = {"layers.0.layers.0": block.ln_1, "layers.0.layers.1.qkv": block.attn.c_attn,
                 "layers.0.layers.1.proj": block.attn.c_proj, "layers.1.layers.0": block.ln_2,
                 "layers.1.layers.1": block.mlp[0], "layers.1.layers.3": block.mlp[2]}
        for name, module in parts.items():
            out[p + name + ".weight"] = module.weight
            out[p + name + ".bias"] = module.bias
    last = 2 + len(model.blocks)
    for name, module in ((f"layers.{last}", model.ln_f), (f"layers.{last + 1}", model.lm_head)):
        out[name + ".weight"] = module.weight
        out[name + ".bias"] = module.bias
    return out


# name -> (the example it trains, a change to its output layer, the PyTorch model, its names).
# llama-char-tied is llama-char with tie_embeddings on its output layer.
MODELS = {
    "gpt-char": ("gpt-char", {}, CharGPT, gpt_names),
    "llama-char": ("llama-char", {}, CharLlama, paralab_names),
    "llama-char-tied": ("llama-char", {"tie_embeddings": True}, lambda: CharLlama(tied=True), paralab_names),
    "moe-char": ("moe-char", {}, lambda: CharLlama(**MOE_CHAR), paralab_names),
}


def read_safetensors(path):
    """{name: float32 tensor} of a safetensors file (8-byte header length, JSON header, data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    data = blob[8 + length:]
    dtypes = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dtypes[e["dtype"]]).reshape(e["shape"])
        out[name] = t.float()
    return out


def load(model, names, weights):
    """Every parameter of `model` from `weights` by its ParaLab name; both sides complete."""
    mine = names(model)
    if set(mine) != set(weights):
        raise RuntimeError(f"names differ: only in the file {sorted(set(weights) - set(mine))}, "
                           f"only in the model {sorted(set(mine) - set(weights))}")
    with torch.no_grad():
        for name, p in mine.items():
            if p.shape != weights[name].shape:
                raise RuntimeError(f"{name}: {tuple(weights[name].shape)} in the file, {tuple(p.shape)} in the model")
            p.copy_(weights[name])


def validation_loss(model, data, train, T, test_limit):
    """The mean cross-entropy over the first `test_limit` consecutive windows of the split."""
    n = min((len(data) - train - 1) // T, test_limit)
    v = torch.frombuffer(bytearray(data[train:train + n * T + 1]), dtype=torch.uint8).long()
    w = v[(torch.arange(n) * T)[:, None] + torch.arange(T + 1)[None, :]]
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, 16):
            x, y = w[i:i + 16, :-1], w[i:i + 16, 1:]
            logits = model(x).double()
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum").item()
    return total / (n * T)


def greedy(model, prompt, tokens, T):
    """engine/run/generate.cpp at temperature 0: the last T tokens in, the arg max of the last one."""
    ids = list(prompt.encode())
    with torch.no_grad():
        for _ in range(tokens):
            window = ids[-T:]
            logits = model(torch.tensor([window]))[0, len(window) - 1]
            ids.append(int(logits.argmax()))
    text = bytes(ids[len(prompt.encode()):])
    return "".join(chr(c) if c in (9, 10) or 32 <= c < 127 else "?" for c in text)


def paralab(binary, *args):
    out = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"paralab {' '.join(args)}: exit {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout


def check(binary, name, corpus, data, steps, test_limit, tokens, tolerance, folder):
    example, output_change, made, names = MODELS[name]
    with open(os.path.join(EXAMPLES, f"{example}.paralab.json")) as f:
        e = json.load(f)
    e["model"]["layers"][-1].update(output_change)
    e["data"]["path"] = corpus
    e["data"]["test_limit"] = test_limit
    e["train"] = {"epochs": 1, "max_steps": steps, "eval_every": 0}
    file = os.path.join(folder, f"{name}.paralab.json")
    with open(file, "w") as f:
        json.dump(e, f)
    db = os.path.join(folder, "runs.db")
    summary = json.loads(next(line for line in paralab(binary, "run", file, "--json", "--db", db).splitlines()
                              if line.startswith("{")))
    weights = os.path.join(folder, f"{name}.safetensors")
    paralab(binary, "export", str(summary["run_id"]), "--weights", weights, "--db", db)
    generated = paralab(binary, "generate", str(summary["run_id"]), "--prompt", PROMPT, "--tokens", str(tokens),
                        "--temperature", "0", "--db", db)
    model = made()
    load(model, names, read_safetensors(weights))
    model.eval()
    T = e["data"]["seq_len"]
    train, _ = split_bytes(len(data))
    loss = validation_loss(model, data, train, T, test_limit)
    text = greedy(model, PROMPT, tokens, T)
    diff = loss - summary["test_loss"]
    same_text = generated.rstrip("\n") == PROMPT + text
    ok = abs(diff) <= tolerance and same_text
    print(f"{name}: {summary['steps']} steps; validation loss paralab {summary['test_loss']:.6f}, "
          f"torch {loss:.6f} (difference {diff:+.2e}, tolerance {tolerance:g}); greedy continuation "
          f"{'the same' if same_text else 'DIFFERS'}: {text!r}" + ("" if same_text else f" vs {generated!r}"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paralab")
    ap.add_argument("--examples", default=",".join(MODELS))
    ap.add_argument("--corpus", default="/usr/share/games/fortunes")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--test-limit", type=int, default=60)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    a = ap.parse_args()
    if not os.path.exists(a.corpus):
        print(f"SKIPPED: no corpus at {a.corpus}")
        return 77
    torch.set_num_threads(1)
    data = read_corpus(a.corpus)
    with tempfile.TemporaryDirectory(prefix="paralab-interchange-") as folder:
        results = [check(a.paralab, n, a.corpus, data, a.steps, a.test_limit, a.tokens, a.tolerance, folder)
                   for n in a.examples.split(",")]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
