#!/usr/bin/env python3
"""Per-step kernel times from Nsight Compute's CSV (tests/gpu/measure_on_gpu.sh, step `profile`).

The CSV is `ncu --csv --page raw --print-units base --metrics gpu__time_duration.sum` over a short
training run: one row per kernel launch, in launch order. A training step ends with its
optimizer, a run of kernels whose names match --step-end (ParaLab's and PyTorch's multi-tensor
optimizer kernels both match the default); the steps are cut there, the first --skip steps
(allocations, cuBLAS's first calls) and the unfinished tail (evaluation) are dropped, and the
rest are averaged: per kernel name, launches and microseconds per step, with the total and the
share of each kind (GEMM, attention, normalisation, elementwise, optimizer, other).

    python3 tests/gpu/kernel_profile.py RUN.csv [--skip 1] [--top 30] [--sequence FILE]
    python3 tests/gpu/kernel_profile.py A.csv --against B.csv    # the two side by side by kind
"""
import argparse
import collections
import csv
import re
import sys

KINDS = [  # first match wins
    ("optimizer", r"multi_tensor|adam|sgd"),
    ("gemm", r"gemm|xmma|cutlass|sm90_|sm80_|cublas|splitK|gemv|dot_kernel"),
    ("attention", r"attention|fmha|flash|softmax|sdpa|efficient"),
    ("normalisation", r"norm"),
    ("loss", r"cross_entropy|nll|log_softmax|loss"),
    ("reduction", r"reduce|sum|column|rows_sum|splitk"),
    ("elementwise", r"elementwise|vectorized|unrolled|gelu|add|mul|copy|cast|fill|bias|scale|"
                    r"gather|scatter|index|embedding|transpose|permute|dropout|heads"),
]


def kind_of(name):
    low = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def read_launches(path):
    """[(kernel name, ns)] in launch order"""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line), None)
    if start is None:
        sys.exit(f"kernel_profile: {path} has no ncu CSV header (\"Kernel Name\")")
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    name_col = header.index("Kernel Name")
    time_col = header.index("gpu__time_duration.sum")
    id_col = header.index("ID") if "ID" in header else None
    launches = []
    for row in rows[1:]:
        if len(row) <= max(name_col, time_col):
            continue
        try:
            ns = float(row[time_col].replace(",", ""))
        except ValueError:  # the units row
            continue
        launches.append((int(row[id_col]) if id_col is not None else len(launches), row[name_col], ns))
    launches.sort()
    return [(name, ns) for _, name, ns in launches]


def split_steps(launches, step_end):
    steps, current, in_end = [], [], False
    for name, ns in launches:
        is_end = re.search(step_end, name, re.IGNORECASE) is not None
        if in_end and not is_end:
            steps.append(current)
            current = []
        current.append((name, ns))
        in_end = is_end
    if in_end:
        steps.append(current)
    return steps


def summarise(path, step_end, skip):
    steps = split_steps(read_launches(path), step_end)
    kept = steps[skip:]
    if not kept:
        sys.exit(f"kernel_profile: {path}: {len(steps)} steps found, none after skipping {skip}")
    per_name = collections.defaultdict(lambda: [0, 0.0])
    for step in kept:
        for name, ns in step:
            per_name[name][0] += 1
            per_name[name][1] += ns
    n = len(kept)
    table = {name: (count / n, ns / n / 1e3) for name, (count, ns) in per_name.items()}
    return table, n, kept[0]


def by_kind(table):
    kinds = collections.defaultdict(lambda: [0.0, 0.0])
    for name, (launches, us) in table.items():
        k = kinds[kind_of(name)]
        k[0] += launches
        k[1] += us
    return kinds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--against", help="a second run's CSV, compared kind by kind")
    ap.add_argument("--step-end", default=r"multi_tensor")
    ap.add_argument("--skip", type=int, default=1)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--sequence", help="write one step's launches, in order, to this file")
    a = ap.parse_args()

    table, n, first = summarise(a.csv, a.step_end, a.skip)
    total = sum(us for _, us in table.values())
    launches = sum(c for c, _ in table.values())
    print(f"{a.csv}: {n} steps averaged; per step {launches:.0f} launches, {total / 1e3:.3f} ms of kernels\n")
    print(f"{'us/step':>10} {'share':>6} {'launches':>8}  kernel")
    for name, (count, us) in sorted(table.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print(f"{us:>10.1f} {100 * us / total:>5.1f}% {count:>8.1f}  {name[:110]}")
    if a.sequence:
        with open(a.sequence, "w") as f:
            for name, ns in first:
                f.write(f"{ns / 1e3:10.1f}  {name}\n")

    kinds = by_kind(table)
    if a.against:
        other, m, _ = summarise(a.against, a.step_end, a.skip)
        okinds = by_kind(other)
        ototal = sum(us for _, us in other.values())
        print(f"\n{'kind':14} {'this ms':>9} {'n':>6} {'other ms':>9} {'n':>6}   (other: {a.against}, {m} steps)")
        for k in sorted(set(kinds) | set(okinds), key=lambda k: -kinds.get(k, [0, 0])[1]):
            mine, theirs = kinds.get(k, [0, 0]), okinds.get(k, [0, 0])
            print(f"{k:14} {mine[1] / 1e3:>9.3f} {mine[0]:>6.0f} {theirs[1] / 1e3:>9.3f} {theirs[0]:>6.0f}")
        print(f"{'total':14} {total / 1e3:>9.3f} {launches:>6.0f} {ototal / 1e3:>9.3f} "
              f"{sum(c for c, _ in other.values()):>6.0f}")
    else:
        print(f"\n{'kind':14} {'ms/step':>9} {'launches':>9}")
        for k, (count, us) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
            print(f"{k:14} {us / 1e3:>9.3f} {count:>9.0f}")


if __name__ == "__main__":
    main()
