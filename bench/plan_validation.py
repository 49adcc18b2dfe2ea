#!/usr/bin/env python3
"""The planner against a published large-scale run set (docs/planner.md, "Validation").

Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (arXiv 2104.04473), Table 1: GPT models from 1.7B to 1T parameters on DGX A100
nodes, with the configuration of each row as Megatron-LM's examples/sc21/run_table_1.sh gives it
(micro-batch size, layers per virtual pipeline stage, full recomputation). For each row this
writes an experiment file, runs `paralab plan --cluster a100-80g --json`, turns the predicted
step time into teraFLOP/s per GPU with the paper's own formula (its equation 3, recomputation
included) and prints a Markdown table beside the published figure.

Usage: plan_validation.py PARALAB
"""
import json
import os
import subprocess
import sys
import tempfile

# params (B), heads, hidden, layers, tp, pp, GPUs, batch, published TFLOP/s per GPU (Table 1),
# micro-batch size, interleave (layers per stage / layers per virtual stage; run_table_1.sh).
ROWS = [
    ("1.7", 24, 2304, 24, 1, 1, 32, 512, 137, 16, 1),
    ("3.6", 32, 3072, 30, 2, 1, 64, 512, 138, 16, 1),
    ("7.5", 32, 4096, 36, 4, 1, 128, 512, 142, 16, 1),
    ("18.4", 48, 6144, 40, 8, 1, 256, 1024, 135, 8, 1),
    ("39.1", 64, 8192, 48, 8, 2, 512, 1536, 138, 4, 1),
    ("76.1", 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 3),
    ("145.6", 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 2),
    ("310.1", 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 2),
    ("529.6", 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 3),
    ("1008.0", 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 1),
]
SEQ, VOCAB = 2048, 51200


def experiment(name, heads, hidden, layers, tp, pp, gpus, batch, mbs, interleave):
    dp = gpus // (tp * pp)
    strategy = {"type": "hybrid", "dp": dp, "tp": tp, "pp": pp, "micro_batches": batch // (dp * mbs),
                "schedule": "interleaved_1f1b" if interleave > 1 else "1f1b"}
    if interleave > 1:
        strategy["interleave"] = interleave
    return {
        "paralab": 1, "name": "megatron-" + name + "b",
        "data": {"dataset": "text", "seq_len": SEQ, "batch_size": batch},
        "model": {"input": [SEQ], "loss": "cross_entropy", "layers": [
            {"type": "embedding", "vocab": VOCAB, "dim": hidden},
            {"type": "position_embedding"},
            {"type": "transformer_block", "heads": heads, "ffn": 4 * hidden, "repeat": layers},
            {"type": "layernorm"},
            {"type": "linear", "out": VOCAB}]},
        "strategy": strategy,
        "optimizer": {"type": "adam", "lr": 0.0001},
        "train": {"precision": "fp16", "recompute": "full"},
    }


def main():
    paralab = sys.argv[1] if len(sys.argv) > 1 else "paralab"
    print("| model | tp | pp | dp | GPUs | batch | micro-batch | interleave | published TFLOP/s/GPU | "
          "predicted | error | fits |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, heads, hidden, layers, tp, pp, gpus, batch, published, mbs, v in ROWS:
            path = os.path.join(tmp, name + ".paralab.json")
            with open(path, "w") as f:
                json.dump(experiment(name, heads, hidden, layers, tp, pp, gpus, batch, mbs, v), f)
            out = subprocess.run([paralab, "plan", path, "--cluster", "a100-80g", "--json"],
                                 check=True, capture_output=True, text=True).stdout
            p = json.loads(out)
            # Equation (3): F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), recomputation included.
            flops = 96 * batch * SEQ * layers * hidden ** 2 * (1 + SEQ / (6 * hidden) + VOCAB / (16 * layers * hidden))
            predicted = flops / (p["step_time_s"] * gpus) / 1e12
            error = (predicted - published) / published
            errors.append(abs(error))
            print(f"| {name}B | {tp} | {pp} | {gpus // (tp * pp)} | {gpus} | {batch} | {mbs} | {v} | {published} | "
                  f"{predicted:.0f} | {100 * error:+.1f}% | {'yes' if p['fits'] else 'no'} |")
    print()
    print(f"mean |error| {100 * sum(errors) / len(errors):.1f}%, max |error| {100 * max(errors):.1f}%")


if __name__ == "__main__":
    main()
