#!/usr/bin/env bash
# Everything a lent GPU machine is needed for, in one call (tests/gpu/README.md, "One call"):
# the gpu suite, the planner's calibration sweep and the kernels' bandwidths, the models table on
# cuda:0 with and without CUDA graphs, ParaLab's char-GPT and GPT-2-small-like runs in fp32 and
# bf16 (each beside its plan on h100-80g), and PyTorch eager's side of each comparison. Each step
# has its own time limit and writes its log as it goes, so a step that hangs or a call cut short
# keeps what came before.
#
#   tests/gpu/measure_on_gpu.sh --bin DIR --out DIR [--data DIR] [--budget SECONDS]
#     --bin DIR     a build folder of the Qt-free CUDA build (app/paralab, bench/, tests/), or the
#                   unpacked tests/gpu/pack_build.sh archive (same layout, libraries in lib/)
#     --out DIR     where the logs and results go (made if missing)
#     --data DIR    Fashion-MNIST for the LeNet rows (default: /usr/share/datasets/fashion-mnist)
#     --budget S    seconds for the whole script (default 540); the suite gets at most half
#     --only LIST   run only these steps (comma list of: gemm_sweep, kernels, suite, gpt_runs,
#                   torch_gpt, torch_small, models_graphs, models_no_graphs, comm, profile,
#                   profile_lenet)
# Exit 3: `paralab` does not start (a library missing; summary.log names it).
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
bin="" out="" data=/usr/share/datasets/fashion-mnist budget=540 only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$(cd "$2" && pwd); shift 2 ;;
        --out) mkdir -p "$2"; out=$(cd "$2" && pwd); shift 2 ;;
        --data) data=$(cd "$2" && pwd) || exit 2; shift 2 ;;
        --budget) budget=$2; shift 2 ;;
        --only) only=",$2,"; shift 2 ;;
        *) echo "measure_on_gpu: unknown argument '$1' (see the comment at the top)" >&2; exit 2 ;;
    esac
done
[ -n "$bin" ] && [ -n "$out" ] || { echo "measure_on_gpu: --bin and --out are required" >&2; exit 2; }
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
# step NAME SECONDS COMMAND...: runs COMMAND with the smaller of SECONDS and what is left, its
# output into NAME.log, and says how it ended in summary.log.
step() {
    local name=$1 limit=$2
    shift 2
    [ -n "$only" ] && [[ "$only" != *",$name,"* ]] && return 0
    local l
    l=$(left)
    [ "$l" -lt "$limit" ] && limit=$l
    if [ "$limit" -le 5 ]; then
        echo "== $name: skipped, the budget is spent" | tee -a "$out/summary.log"
        return 0
    fi
    local t0=$(date +%s) rc=0
    timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1 || rc=$?
    echo "== $name: exit $rc in $(( $(date +%s) - t0 )) s (limit $limit s)" | tee -a "$out/summary.log"
}

# The libraries: the pack's own (OpenBLAS, SQLite), the toolkit's runtime and cuBLAS, and wherever
# this machine keeps cuDNN and NCCL (the system, or PyTorch's wheels).
libs="$bin/lib"
for so in libcudart.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
    found=$( (ldconfig -p 2>/dev/null | awk -v n="$so" '$1 == n {print $NF; exit}'))
    [ -z "$found" ] && found=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name "$so" 2>/dev/null | head -1)
    [ -n "$found" ] && libs="$libs:$(dirname "$found")"
    echo "$so: ${found:-not found}" >> "$out/summary.log"
done
# PyTorch runs with the environment it came with: a system cuDNN ahead of its own stops it.
torch_env=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
export torch_ld="${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
paralab="$bin/app/paralab"
export bin out repo paralab data
if ! "$paralab" --help > /dev/null 2>&1; then  # a pack that does not start here: say why
    { echo "measure_on_gpu: $paralab does not start:"; ldd "$paralab" | grep "not found"; } | tee -a "$out/summary.log"
    exit 3
fi
{ nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version,clocks.max.sm --format=csv
  nproc; "$paralab" devices; } >> "$out/summary.log" 2>&1

# A corpus of random bytes for the text runs (the bench's rule: no NUL-free text needed).
export corpus="$out/corpus.bin"
head -c 4000000 /dev/urandom > "$corpus"

# 1. The planner's calibration: GEMM rates by size and precision, the copy bandwidth; kernels.
step gemm_sweep 60 "$bin/bench/bench_gpu_kernels" --gemm-sweep
step kernels 60 "$bin/bench/bench_gpu_kernels"

# 2. The gpu suite: gpu_device_test alone (it reads the driver's free bytes), the rest side by
# side, gpu_training_test in three shards.
suite() {
    local rc=0 pids=()
    "$bin/tests/gpu_device_test" --gtest_brief=1 > "$out/suite-gpu_device_test.txt" 2>&1 || rc=1
    for t in "$bin"/tests/gpu_*_test; do
        case "$(basename "$t")" in gpu_device_test | gpu_training_test) continue ;; esac
        "$t" --gtest_brief=1 > "$out/suite-$(basename "$t").txt" 2>&1 &
        pids+=($!)
    done
    for shard in 0 1 2; do
        GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$shard "$bin/tests/gpu_training_test" --gtest_brief=1 \
            > "$out/suite-gpu_training_test-$shard.txt" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    for f in "$out"/suite-*.txt; do
        echo "--- $(basename "$f" .txt)"
        grep -E '^\[  (PASSED|FAILED|SKIPPED) \]|Failure|error|Expected|Which is|actual' "$f" | head -60
        grep -E '^\[==========\]' "$f" | tail -1
    done
    return $rc
}
export -f suite
step suite $(( budget / 2 )) bash -c suite

# 3. ParaLab's transformer runs on cuda:0: the char-GPT example and the GPT-2-small-like model,
# fp32 and bf16; per-step times from the store.
gpt_runs() {
    for model in gpt-char gpt2-small; do
        local file="$repo/resources/examples/gpt-char.paralab.json" steps=300
        [ "$model" = gpt2-small ] && file="$repo/bench/gpu/gpt2-small.paralab.json" steps=60
        for precision in fp32 bf16; do
            python3 - "$file" "$corpus" "$precision" "$steps" > "$out/$model-$precision.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
e["data"]["path"] = sys.argv[2]
e["devices"] = ["cuda:0"]
e["name"] = e["name"] + "-" + sys.argv[3]
e["train"].update({"precision": sys.argv[3], "max_steps": int(sys.argv[4]), "eval_every": 0})
json.dump(e, sys.stdout)
PY
            echo "### $model $precision"
            "$paralab" run "$out/$model-$precision.json" --db "$out/runs.db" --json || echo "(exit $?)"
        done
    done
    python3 - "$out/runs.db" <<'PY'
import sqlite3, statistics, sys
db = sqlite3.connect(sys.argv[1])
for run_id, name in db.execute("SELECT run_id, name FROM runs ORDER BY run_id"):
    walls = [w for (w,) in db.execute("SELECT wall_s FROM records WHERE run_id = ? ORDER BY step", (run_id,))]
    steps = [b - a for a, b in zip(walls, walls[1:])]
    later = steps[len(steps) // 5:]  # past the first fifth: allocations and cuBLAS start-up
    if later:
        print(f"run {run_id} {name}: {len(walls)} steps, median ms/step {1e3 * statistics.median(later):.3f} "
              f"(first step {1e3 * walls[0]:.1f} ms)")
PY
    # The planner's h100-80g preset beside each run (docs/planner.md, the H100 rows).
    for id in $(python3 -c 'import sqlite3, sys; print(*[r for (r,) in sqlite3.connect(sys.argv[1]).execute("SELECT run_id FROM runs ORDER BY run_id")])' "$out/runs.db"); do
        "$paralab" plan --compare "$id" --db "$out/runs.db" --cluster h100-80g || echo "(plan --compare $id: exit $?)"
    done
    rm -rf "$out/checkpoints"  # each run's last state, GPT-2-small's a gigabyte: not brought back
}
export -f gpt_runs
step gpt_runs 120 bash -c gpt_runs

# 4. PyTorch eager (and its whole-step CUDA graph) on the same models.
step torch_gpt 120 "${torch_env[@]}" python3 "$repo/bench/compare_torch_gpu.py" --models gpt-char,gpt2-small \
    --modes fp32,tf32,bf16,graph --steps 40 --rounds 3 --warmup 5 --json "$out/torch_gpt.json"
step torch_small 90 "${torch_env[@]}" python3 "$repo/bench/compare_torch_gpu.py" --models mlp,lenet,lstm \
    --modes fp32,tf32,bf16,graph --json "$out/torch_small.json"

# 5. The models table on cuda:0 with CUDA graphs (whole steps, recurrent loops) and without.
step models_graphs 60 "$paralab" bench --models-only --device cuda:0 --data "$data"
PARALAB_CUDA_GRAPHS=0 step models_no_graphs 60 "$paralab" bench --models-only --device cuda:0 --data "$data"

step comm 40 "$bin/bench/bench_gpu_comm"

# 6. Where a step's time goes, kernel by kernel, in ParaLab and in PyTorch eager: Nsight Compute
# times every kernel of a few steps (clocks and caches left as they run), and
# tests/gpu/kernel_profile.py averages the steps after the first and compares the two by kind.
# Step `profile` is a GPT-2-small fp32 step, `profile_lenet` the models table's LeNet (batch 64,
# SGD with momentum). A profile-torch-MODEL.csv already in --out (an earlier call's, on the same
# kind of GPU) is kept, and only ParaLab is profiled.
profile_model() {
    local model=$1 ncu steps=10
    [ "$model" = gpt2-small ] && steps=2
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    [ -n "$ncu" ] || { echo "profile: no ncu (Nsight Compute) on this machine"; return 1; }
    local flags=(--target-processes all --clock-control none --cache-control none --csv --page raw
                 --print-units base --metrics gpu__time_duration.sum --launch-count 20000)
    local work
    work=$(mktemp -d)
    python3 - "$model" "$repo/bench/gpu/gpt2-small.paralab.json" "$corpus" "$data" > "$work/run.json" <<'PY'
import json, sys
model, gpt2, corpus, data = sys.argv[1:]
if model == "gpt2-small":
    e = json.load(open(gpt2))
    e["data"]["path"] = corpus
    e["train"].update({"max_steps": 4, "eval_every": 0})
else:  # bench/model_bench.cpp's LeNet
    conv = lambda c: {"type": "conv2d", "out_channels": c, "kernel": 5, "padding": 2}
    e = {"paralab": 1, "name": "profile-lenet", "seed": 7,
         "data": {"dataset": "fashion-mnist", "path": data, "train_limit": 64 * 12, "test_limit": 64,
                  "batch_size": 64, "workers": 0, "shuffle": False},
         "model": {"layers": [conv(16), {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
                              conv(32), {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
                              {"type": "flatten"}, {"type": "linear", "out": 10}],
                   "loss": "cross_entropy"},
         "devices": ["cuda:0"], "strategy": {"type": "single"},
         "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9},
         "train": {"epochs": 1, "max_steps": 12, "eval_every": 0}}
json.dump(e, sys.stdout)
PY
    "$ncu" "${flags[@]}" --log-file "$out/profile-paralab-$model.csv" \
        "$paralab" run "$work/run.json" --db "$work/runs.db" > /dev/null || echo "(paralab under ncu: exit $?)"
    [ -s "$out/profile-torch-$model.csv" ] ||
        env "LD_LIBRARY_PATH=$torch_ld" "$ncu" "${flags[@]}" --log-file "$out/profile-torch-$model.csv" \
            python3 "$repo/bench/compare_torch_gpu.py" --models "$model" --modes fp32 --steps "$steps" \
            --rounds 1 --warmup 2 > /dev/null || echo "(torch under ncu: exit $?)"
    rm -rf "$work"
    python3 "$repo/tests/gpu/kernel_profile.py" "$out/profile-paralab-$model.csv" \
        --against "$out/profile-torch-$model.csv" --top 40 --sequence "$out/profile-paralab-$model-step.txt"
    echo
    python3 "$repo/tests/gpu/kernel_profile.py" "$out/profile-torch-$model.csv" --top 30 \
        --sequence "$out/profile-torch-$model-step.txt"
}
export -f profile_model
step profile 240 bash -c "profile_model gpt2-small"
step profile_lenet 120 bash -c "profile_model lenet"
rm -f "$corpus"
echo "== done in $(( $(date +%s) - start )) s" | tee -a "$out/summary.log"
