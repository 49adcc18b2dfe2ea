#!/usr/bin/python3
"""Where a step's time goes, per device: the spans of a `paralab run --stream` output.

    paralab run EXPERIMENT --stream > run.jsonl
    bench/phase_times.py run.jsonl [--skip 50]

For each device and span kind (forward, backward, all_reduce_bucket, optimizer, data_wait, ...)
prints the count, median and mean in ms over the steps after the first `--skip`, and the step
period (from one step's first span to the next's). docs/benchmarks.md uses it for the ddp
breakdowns of docs/benchmarks.md.
"""
import argparse
import collections
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stream", help="the output of paralab run --stream ('-': standard input)")
    ap.add_argument("--skip", type=int, default=50, help="leave out steps up to this one (warm-up)")
    a = ap.parse_args()
    spans = collections.defaultdict(list)  # (device, kind) -> [ms]
    starts = collections.defaultdict(dict)  # device -> step -> first span's start (s)
    source = sys.stdin if a.stream == "-" else open(a.stream, encoding="utf-8")
    for line in source:
        line = line.strip()
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event.get("event") != "steps":
            continue
        for step, device, kind, t0, t1, *_ in event.get("spans", []):
            if step <= a.skip:
                continue
            spans[(device, kind)].append((t1 - t0) * 1e3)
            first = starts[device].get(step)
            starts[device][step] = t0 if first is None else min(first, t0)
    if not spans:
        sys.exit(f"phase_times: no spans after step {a.skip} in {a.stream}")
    print(f"{'device':10} {'span':22} {'count':>6} {'median ms':>10} {'mean ms':>8}")
    for (device, kind), ms in sorted(spans.items()):
        print(f"{device:10} {kind:22} {len(ms):>6} {statistics.median(ms):>10.3f} {statistics.fmean(ms):>8.3f}")
    for device, by_step in sorted(starts.items()):
        steps = sorted(by_step)
        periods = [(by_step[b] - by_step[a]) * 1e3 for a, b in zip(steps, steps[1:]) if b == a + 1]
        if periods:
            print(f"{device:10} {'step period':22} {len(periods):>6} {statistics.median(periods):>10.3f} "
                  f"{statistics.fmean(periods):>8.3f}")


if __name__ == "__main__":
    main()
