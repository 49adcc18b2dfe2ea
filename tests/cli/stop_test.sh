#!/usr/bin/env bash
# Stop is prompt in every phase of `paralab run` (docs/experiment-format.md, the command line):
# SIGINT while the data loads, during the evaluation after training, and during a straggler's
# delay ends the run within a bound, with exit 0 and the run stored as `stopped`.
# Each case waits for the run to reach its phase (a condition, checked in a bounded loop), then
# sends SIGINT and waits, bounded, for the process to end.
# Usage: stop_test.sh PARALAB
set -u
paralab=$1
tmp=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; wait "$pid" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
export XDG_DATA_HOME="$tmp/data"
db="$tmp/runs.db"
passed=0
failed=0
end_bound_s=20   # how long a stopped run may take to end (each phase would take far longer)

fail() { echo "FAIL $1"; cat "$tmp/out" "$tmp/err" 2>/dev/null | tail -20; failed=$((failed + 1)); }

# wait_for NAME CONDITION...: polls the condition until it holds (at most 120 s) while the run
# lives. Returns 1 when the run ended first or the bound passed.
wait_for() {
    local name=$1
    shift
    for _ in $(seq 12000); do
        "$@" && return 0
        kill -0 "$pid" 2>/dev/null || { fail "$name: the run ended before reaching the phase"; return 1; }
        sleep 0.01
    done
    fail "$name: the run did not reach the phase in 120 s"
    return 1
}

# stop_and_check NAME EXPECTED_STEPS: SIGINT, then the run must end within end_bound_s with
# exit 0, a stopped summary (no test metrics) and the stored run stopped.
stop_and_check() {
    local name=$1 steps=$2
    kill -INT "$pid"
    for _ in $(seq $((end_bound_s * 20))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"; wait "$pid" 2>/dev/null; pid=
        fail "$name: still running ${end_bound_s} s after SIGINT"; return
    fi
    wait "$pid"
    local rc=$?
    pid=
    [ "$rc" = 0 ] || { fail "$name: exit $rc"; return; }
    grep -q '"status":"stopped"' "$tmp/out" || { fail "$name: summary not stopped"; return; }
    grep -q '"test_accuracy":null' "$tmp/out" || { fail "$name: a cut-short run reported test metrics"; return; }
    [ -z "$steps" ] || grep -q "\"steps\":$steps," "$tmp/out" || { fail "$name: expected $steps steps"; return; }
    local id
    id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$tmp/out")
    "$paralab" runs show "$id" --db "$db" --json >"$tmp/show" 2>&1
    grep -q '"status": "stopped"' "$tmp/show" || { fail "$name: not stored as stopped"; cat "$tmp/show"; return; }
    echo "ok   $name"; passed=$((passed + 1))
}

# start FILE ARGS...: the run in the background. The previous run's output goes first, so that
# a phase condition cannot be met by it before the new process has opened its own.
start() {
    rm -f "$tmp/out" "$tmp/err"
    "$paralab" run "$@" --db "$db" --json >"$tmp/out" 2>"$tmp/err" &
    pid=$!
}

experiment() {  # experiment FILE DATA_JSON LAYERS_JSON STRATEGY_JSON
    cat >"$1" <<EOF
{"paralab": 1, "name": "stop-test", "seed": 1, "data": $2,
 "model": {"layers": $3, "loss": "cross_entropy"},
 "devices": ["cpu:0"], "strategy": $4, "optimizer": {"type": "sgd", "lr": 0.01},
 "train": {"epochs": 1}}
EOF
}

# ---- while the data loads -------------------------------------------------------------------
# Fashion-MNIST files whose training images claim 1 GB and hold 600 MB of it (1 MiB of noise,
# then zeros, 1.6 MB of gzip): a load that is not stopped reads the 600 MB and fails as
# truncated. The stop comes once the process holds the file open.
mkdir -p "$tmp/fmnist"
python3 - "$tmp/fmnist" <<'EOF'
import gzip, os, struct, sys
d = sys.argv[1]
def write(name, header, parts):
    with gzip.open(os.path.join(d, name), "wb", compresslevel=1) as f:
        f.write(header)
        for p in parts: f.write(p)
zeros = bytes(16 << 20)
write("train-images-idx3-ubyte.gz", struct.pack(">IIII", 0x803, 4000, 500, 500),
      [os.urandom(1 << 20)] + [zeros] * 37)
write("train-labels-idx1-ubyte.gz", struct.pack(">II", 0x801, 4000), [bytes(4000)])
write("t10k-images-idx3-ubyte.gz", struct.pack(">IIII", 0x803, 2, 500, 500), [bytes(2 * 500 * 500)])
write("t10k-labels-idx1-ubyte.gz", struct.pack(">II", 0x801, 2), [bytes(2)])
EOF
experiment "$tmp/load.paralab.json" "{\"dataset\": \"fashion-mnist\", \"path\": \"$tmp/fmnist\", \"batch_size\": 8}" \
    '[{"type": "flatten"}, {"type": "linear", "out": 10}]' '{"type": "single"}'
holds_images() { ls -l "/proc/$pid/fd" 2>/dev/null | grep -q 'train-images-idx3-ubyte.gz'; }
start "$tmp/load.paralab.json"
wait_for stop_while_loading holds_images && stop_and_check stop_while_loading 0

# ---- during the evaluation after training ---------------------------------------------------
# A wide model over a large test split: its one evaluation takes minutes on a CPU. The stop
# comes once the progress line shows the last step.
experiment "$tmp/eval.paralab.json" '{"dataset": "spirals", "samples": 400000, "test_fraction": 0.9, "batch_size": 16}' \
    '[{"type": "linear", "out": 2048}, {"type": "relu"}, {"type": "linear", "out": 2048}, {"type": "relu"}, {"type": "linear", "out": 3}]' \
    '{"type": "single"}'
last_step_shown() { grep -q 'step 2/2' "$tmp/err" 2>/dev/null; }
start "$tmp/eval.paralab.json" --steps 2
wait_for stop_during_final_eval last_step_shown && stop_and_check stop_during_final_eval 2

# ---- during a straggler's delay -------------------------------------------------------------
# A minute of delay in every step (the largest allowed); the stop comes once the run has started.
experiment "$tmp/straggler.paralab.json" '{"dataset": "spirals", "batch_size": 16}' \
    '[{"type": "linear", "out": 8}, {"type": "relu"}, {"type": "linear", "out": 3}]' \
    '{"type": "single", "straggler": {"device": "cpu:0", "delay_ms": 60000}}'
run_started() { grep -q 'steps on cpu:0' "$tmp/err" 2>/dev/null; }
start "$tmp/straggler.paralab.json"
wait_for stop_in_straggler_delay run_started && stop_and_check stop_in_straggler_delay ""

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
