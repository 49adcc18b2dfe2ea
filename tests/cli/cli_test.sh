#!/usr/bin/env bash
# The command line as a user meets it (docs/experiment-format.md): exit codes 0/1/2, one clear line on
# bad input, the --json summary with every key, and each shipped example running a few steps.
# Usage: cli_test.sh PARALAB EXAMPLES_DIR
set -u
paralab=$1
examples=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_DATA_HOME="$tmp/data"  # the default run store goes here, not into the user's home
passed=0
failed=0

check() {  # check NAME EXPECTED_CODE EXPECTED_TEXT -- command...
    local name=$1 code=$2 text=$3
    shift 4
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" != "$code" ]; then
        echo "FAIL $name: exit $rc, expected $code"; cat "$tmp/err"; failed=$((failed + 1)); return
    fi
    if [ -n "$text" ] && ! grep -qF -- "$text" "$tmp/out" "$tmp/err"; then
        echo "FAIL $name: output lacks '$text'"; cat "$tmp/out" "$tmp/err"; failed=$((failed + 1)); return
    fi
    if grep -qiE "terminate called|core dumped|Segmentation|what\(\)" "$tmp/err"; then
        echo "FAIL $name: crashed"; cat "$tmp/err"; failed=$((failed + 1)); return
    fi
    echo "ok   $name"; passed=$((passed + 1))
}

good="$examples/spirals-mlp.paralab.json"

# --json prints exactly one JSON object with every key docs/experiment-format.md lists.
check run_json 0 '"status":"finished"' -- "$paralab" run "$good" --steps 20 --json
for key in run_id status name strategy devices steps epochs final_loss test_loss test_accuracy \
           samples_per_s wall_s peak_memory_bytes; do
    grep -q "\"$key\":" "$tmp/out" || { echo "FAIL run_json: missing key $key"; failed=$((failed + 1)); }
done
[ "$(grep -c '^{' "$tmp/out")" = 1 ] || { echo "FAIL run_json: not exactly one JSON line"; failed=$((failed + 1)); }
grep -q '"steps":20' "$tmp/out" || { echo "FAIL run_json: --steps 20 not honoured"; failed=$((failed + 1)); }

check validate 0 'total: 4,547 parameters (17.8 KiB), 9,091 FLOPs per example' -- "$paralab" validate "$good"
# validate --json: the summary as data, totals exact (2*64+64 + 64*64+64 + 64*3+3 = 4547).
check validate_json 0 '"parameters": 4547' -- "$paralab" validate "$good" --json
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert [l["type"] for l in s["layers"]] == ["linear", "relu", "linear", "relu", "linear"], s["layers"]
assert s["layers"][0]["output"] == [64] and s["layers"][0]["parameters"] == 192 and s["layers"][0]["flops"] == 320
assert sum(l["parameters"] for l in s["layers"]) == s["totals"]["parameters"] == 4547
# what each layer keeps (the linears their inputs 2, 64, 64; the relus their outputs 64, 64),
# the copy of the output the loss keeps (3), and a layer output gradient with its input
# gradient while its backward runs (2 * 64)
assert s["totals"]["activation_bytes"] == (2 + 64 * 4 + 3 + 2 * 64) * s["totals"]["batch_size"] * 4
assert s["strategy"]["type"] == "single"
' "$tmp/out" || { echo "FAIL validate_json: summary"; failed=$((failed + 1)); }
check devices 0 'cpu' -- "$paralab" devices
check devices_json 0 '"kind": "cpu"' -- "$paralab" devices --json

# Bad input: exit 2 and a message naming the cause.
printf '{ "paralab": 1, "name": ' >"$tmp/broken.paralab.json"
check broken_json 2 'not valid JSON' -- "$paralab" run "$tmp/broken.paralab.json"
sed 's/"out": 64}/"out": -4}/' "$good" >"$tmp/negative.paralab.json"
check negative_size 2 'model.layers[0].out: expected a positive integer, got -4' -- "$paralab" validate "$tmp/negative.paralab.json"
sed 's/"batch_size"/"batch_sise"/' "$good" >"$tmp/typo.paralab.json"
check misspelled_key 2 'did you mean "batch_size"' -- "$paralab" run "$tmp/typo.paralab.json"
sed 's/"type": "single"/"type": "ddq"/' "$good" >"$tmp/strategy.paralab.json"
check unknown_strategy 2 'strategy.type: unknown value "ddq"' -- "$paralab" run "$tmp/strategy.paralab.json"
sed 's/"type": "single"/"type": "ddp", "stage": 2/' "$good" >"$tmp/option.paralab.json"
check foreign_option 2 'strategy.stage: not an option of the ddp strategy' -- "$paralab" validate "$tmp/option.paralab.json"
sed 's/"type": "single"/"type": "pipeline", "split": [3, 1]/' "$good" >"$tmp/split.paralab.json"
check split_against_layers 2 'strategy.split: expected 0 layer indices' -- "$paralab" validate "$tmp/split.paralab.json"
# validate makes every check run makes before training: each of these files is refused by both,
# with the same message.
sed 's/"devices": \["cpu:0"\]/"devices": ["cpu:0", "cpu:1"]/' "$good" >"$tmp/m_single.paralab.json"
sed -e 's/"type": "single"}/"type": "ddp", "straggler": {"device": "cpu:3", "delay_ms": 1}}/' \
    -e 's/"devices": \["cpu:0"\]/"devices": ["cpu:0", "cpu:1"]/' "$good" >"$tmp/m_straggler.paralab.json"
sed -e 's/"devices": \["cpu:0"\]/"devices": ["cpu:0", "cpu:0"]/' -e 's/"type": "single"/"type": "ddp"/' "$good" >"$tmp/m_twice.paralab.json"
sed 's/"classes": 3/"classes": 5/' "$good" >"$tmp/m_classes.paralab.json"
sed 's/"type": "single"/"type": "param_server"/' "$good" >"$tmp/m_server.paralab.json"
for m in "single:devices: the single strategy runs on one device, got 2" \
         "straggler:strategy.straggler.device: cpu:3 is not one of the run's devices" \
         "twice:devices[1]: cpu:0 is listed twice" \
         "classes:model: the last layer gives 3 class scores, but the spirals data set has 5 classes" \
         "server:devices: the param_server strategy needs at least 2 devices, got 1"; do
    name=${m%%:*} text=${m#*:}
    check "validate_refuses_$name" 2 "$text" -- "$paralab" validate "$tmp/m_$name.paralab.json"
    check "run_refuses_$name" 2 "$text" -- "$paralab" run "$tmp/m_$name.paralab.json" --steps 2
done
# Hostile sizes and files: clear errors naming the path, no crash, no wrapped numbers.
sed 's/"out": 64}/"out": 4611686018427387904}/' "$good" >"$tmp/h_out.paralab.json"
check huge_out 2 'model.layers[0].out: expected an integer from 1 to 2147483648, got 4611686018427387904' -- "$paralab" validate "$tmp/h_out.paralab.json"
sed 's/"seed": [0-9]*/"seed": 18446744073709551615/' "$good" >"$tmp/h_seed.paralab.json"
check huge_seed 2 'seed: expected a non-negative integer, got 18446744073709551615' -- "$paralab" validate "$tmp/h_seed.paralab.json"
sed 's/"seed": [0-9]*/"seed": 1e99999/' "$good" >"$tmp/h_number.paralab.json"
check huge_number 2 ': number out of range (1e99999 is beyond a double)' -- "$paralab" validate "$tmp/h_number.paralab.json"
deep() {  # the experiment with N residual blocks nested in one another
    python3 -c 'import sys; s = open(sys.argv[1]).read(); n = int(sys.argv[2])
print(s.replace("\"layers\": [", "\"layers\": [" + "{\"type\": \"residual\", \"layers\": [" * n + "{\"type\": \"relu\"}" + "]}" * n + ", ", 1))' "$good" "$1"
}
deep 100 >"$tmp/h_deep.paralab.json"
check deep_nesting 2 'residual blocks nested more than 64 deep' -- "$paralab" validate "$tmp/h_deep.paralab.json"
# Deeper than any model: refused while the text is read, before a value is built.
deep 10000 >"$tmp/h_deeper.paralab.json"
check deep_json 2 'h_deeper.paralab.json: nested deeper than 512 levels of arrays and objects' -- "$paralab" validate "$tmp/h_deeper.paralab.json"
# A key given twice is refused with its JSON path, not taken from the last.
sed 's/"out": 64}/"out": 64, "out": 65}/' "$good" >"$tmp/h_dup.paralab.json"
check duplicate_key 2 'h_dup.paralab.json: model.layers[0].out: duplicate key; a key appears once in an object' -- "$paralab" validate "$tmp/h_dup.paralab.json"
# Names with terminal control characters are printed escaped.
sed 's/"name": "[^"]*"/"name": "a\\u001b[2Jb"/' "$good" >"$tmp/h_escape.paralab.json"
check escaped_name 0 'a\x1B[2Jb' -- "$paralab" validate "$tmp/h_escape.paralab.json"
# Command-line numbers: refused with the accepted range, never clamped or wrapped.
check steps_1e20 2 "--steps: expected an integer from 1 to 9223372036854775807, got '1e20'" -- "$paralab" run "$good" --steps 1e20
check steps_negative 2 "--steps: expected an integer from 1 to 9223372036854775807, got '-5'" -- "$paralab" run "$good" --steps -5
check rank_timeout_nan 2 "--rank-timeout: expected a number from 1 to 86400, got 'nan'" -- "$paralab" run "$good" --rank-timeout nan
check seed_negative 2 "--seed: expected an integer from 0 to 18446744073709551615, got '-1'" -- "$paralab" generate 1 --prompt a --tokens 3 --seed -1
check seed_2_64 2 "--seed: expected an integer from 0 to 18446744073709551615, got '18446744073709551616'" -- "$paralab" generate 1 --prompt a --tokens 3 --seed 18446744073709551616
check seed_1e23 2 "--seed: expected an integer from 0 to 18446744073709551615, got '1e23'" -- "$paralab" generate 1 --prompt a --tokens 3 --seed 1e23
check temperature_nan 2 "--temperature: expected a number from 0 to 100, got 'nan'" -- "$paralab" generate 1 --prompt a --tokens 3 --temperature nan
check endless_file 2 'larger than 16 MiB' -- "$paralab" validate /dev/zero
# A 10 MB unknown value and key: named shortened, with no suggestion worked out for them.
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); j["strategy"]["type"] = "x" * 10000000; j["y" * 1000] = 1
json.dump(j, open(sys.argv[2], "w"))' "$good" "$tmp/h_long.paralab.json"
check long_value 2 'strategy.type: unknown value "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."' -- "$paralab" validate "$tmp/h_long.paralab.json"
[ "$(wc -c <"$tmp/err")" -lt 600 ] || { echo "FAIL long_value: the message echoes the value"; failed=$((failed + 1)); }
# Listing creates nothing; another application's database is refused and left as it was.
check list_missing_store 0 'no run store at' -- "$paralab" runs list --db "$tmp/typo/sub/x.db"
[ ! -e "$tmp/typo" ] || { echo "FAIL list_missing_store: created $tmp/typo"; failed=$((failed + 1)); }
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("CREATE TABLE runs (id INTEGER)"); c.commit()' "$tmp/foreign.db"
sum_before=$(md5sum <"$tmp/foreign.db")
check foreign_store 2 'not a ParaLab run store' -- "$paralab" run "$good" --steps 2 --db "$tmp/foreign.db"
[ "$(md5sum <"$tmp/foreign.db")" = "$sum_before" ] || { echo "FAIL foreign_store: the file changed"; failed=$((failed + 1)); }
sed -e 's/"type": "single"}/"type": "ddp", "straggler": {"device": "cpu:1", "delay_ms": 3600000}}/' \
    -e 's/"devices": \["cpu:0"\]/"devices": ["cpu:0", "cpu:1"]/' "$good" >"$tmp/h_delay.paralab.json"
check endless_straggler 2 'strategy.straggler.delay_ms: expected a number in [0, 60000]' -- "$paralab" validate "$tmp/h_delay.paralab.json"
sed 's/"epochs": [0-9]*/"epochs": 9223372036854775807/' "$good" >"$tmp/h_epochs.paralab.json"
check huge_epochs 0 '"steps":3' -- "$paralab" run "$tmp/h_epochs.paralab.json" --steps 3 --json
check unknown_strategy_flag 2 "--strategy: unknown strategy 'ddq'; expected one of single, data_parallel" -- "$paralab" run "$good" --strategy ddq
sed 's/"type": "relu"/"type": "rleu"/' "$good" >"$tmp/layer.paralab.json"
check unknown_layer 2 'did you mean "relu"' -- "$paralab" validate "$tmp/layer.paralab.json"
sed 's/"input": \[2\]/"input": [1, 28, 28]/' "$good" >"$tmp/shape.paralab.json"
check shape_mismatch 2 'model.input' -- "$paralab" run "$tmp/shape.paralab.json"
sed -e 's/"dataset": "spirals"/"dataset": "mnist", "path": "\/nonexistent"/' -e '/"samples"/d' -e '/"classes"/d' -e '/"noise"/d' "$good" >"$tmp/missing.paralab.json"
check missing_data 2 '/nonexistent' -- "$paralab" run "$tmp/missing.paralab.json"
check missing_file 2 'cannot open' -- "$paralab" run "$tmp/none.paralab.json"
check bad_argument 2 '' -- "$paralab" run "$good" --steps -3
check unknown_command 2 '' -- "$paralab" frobnicate
sed 's/"type": "adam", "lr": 0.01/"type": "sgd", "lr": 1e9/' "$good" >"$tmp/diverge.paralab.json"
check nan_loss 1 'lower optimizer.lr' -- "$paralab" run "$tmp/diverge.paralab.json" --json
grep -q '"status":"failed"' "$tmp/out" || { echo "FAIL nan_loss: status not failed"; failed=$((failed + 1)); }
grep -q '"error":' "$tmp/out" || { echo "FAIL nan_loss: no error key"; failed=$((failed + 1)); }

# Ctrl-C stops cleanly between steps: status "stopped", exit 0, the summary still printed.
# A script's background job ignores SIGINT until paralab installs its handler, so the signal is
# repeated until the run ends (a stop is idempotent), and the wait is bounded: a run that does
# not stop fails this check instead of hanging the suite.
"$paralab" run "$good" --epochs 100000 --json >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 120); do
    sleep 0.5
    kill -INT "$pid" 2>/dev/null || break
done
if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"; wait "$pid"
    echo "FAIL ctrl_c: still running 60 s after the first SIGINT"; failed=$((failed + 1))
else
    wait "$pid"
    rc=$?
    if [ "$rc" = 0 ] && grep -q '"status":"stopped"' "$tmp/out"; then
        echo "ok   ctrl_c"; passed=$((passed + 1))
    else
        echo "FAIL ctrl_c: exit $rc"; cat "$tmp/out" "$tmp/err"; failed=$((failed + 1))
    fi
fi

# The run store: runs list/show/export, and a killed run marked interrupted with its rows.
db="$tmp/runs.db"
check store_run 0 '"run_id":1' -- "$paralab" run "$good" --db "$db" --steps 30 --json
check runs_list 0 '"status": "finished"' -- "$paralab" runs list --db "$db" --json
check runs_show 0 '"config"' -- "$paralab" runs show 1 --db "$db" --json
check runs_export 0 '' -- "$paralab" runs export 1 --csv "$tmp/run1.csv" --db "$db"
[ "$(wc -l <"$tmp/run1.csv")" = 31 ] || { echo "FAIL runs_export: expected 31 lines"; failed=$((failed + 1)); }
check runs_show_missing 2 'no run 7' -- "$paralab" runs show 7 --db "$db"
check runs_export_unwritable 2 'cannot write the CSV file: No such file or directory' -- "$paralab" runs export 1 --csv "$tmp/none/run1.csv" --db "$db"
"$paralab" run "$good" --db "$db" --epochs 100000 >/dev/null 2>&1 &
pid=$!
# Killed once it has committed steps (polled, at most 60 s, so a slow machine is no failure).
for _ in $(seq 120); do
    "$paralab" runs show 2 --db "$db" --json 2>/dev/null | grep -qE '"steps": [1-9]' && break
    sleep 0.5
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
check killed_run 0 '"status": "interrupted"' -- "$paralab" runs list --db "$db" --json
check killed_run_rows 0 '"steps"' -- "$paralab" runs show 2 --db "$db" --json
grep -q '"steps": 0' "$tmp/out" && { echo "FAIL killed_run_rows: no committed steps"; failed=$((failed + 1)); }
echo "notes, not a database" >"$tmp/notes.db"
check corrupt_db 2 'not a ParaLab run store' -- "$paralab" runs list --db "$tmp/notes.db"
grep -q "notes, not a database" "$tmp/notes.db" || { echo "FAIL corrupt_db: file changed"; failed=$((failed + 1)); }

# paralab bench: the smallest suite runs and prints one JSON object with every table (timings
# are recorded in docs/benchmarks.md, never asserted).
check bench_smoke_json 0 '"all_reduce":' -- "$paralab" bench --smoke --json
for key in mode machine data all_reduce strategies ddp pipeline_idle transformer attention; do
    grep -q "\"$key\":" "$tmp/out" || { echo "FAIL bench_smoke_json: missing key $key"; failed=$((failed + 1)); }
done
[ "$(grep -c '^{' "$tmp/out")" = 1 ] || { echo "FAIL bench_smoke_json: not exactly one JSON line"; failed=$((failed + 1)); }
# tensor_parallel's bytes on 4 devices are the textbook's: per block and step 4 all-reduces of
# b·s·h = 12·64·128 floats, each moving 2(N−1)/N of it per device: 16 · 1.5 · 393,216 B.
python3 - "$tmp/out" <<'PY' || { echo "FAIL bench_smoke_json: tensor_parallel bytes"; failed=$((failed + 1)); }
import json, sys
rows = {r["label"]: r for r in json.load(open(sys.argv[1]))["transformer"]}
tp = rows["tensor_parallel"]
assert tp["status"] == "finished", tp
assert tp["comm_bytes_per_step"] == 16 * 1.5 * 12 * 64 * 128 * 4, tp["comm_bytes_per_step"]
# The fused attention kernel keeps each row's log-sum-exp, the materialized one the probabilities.
att = {r["kernel"]: r for r in json.load(open(sys.argv[1]))["attention"]}
T, H, D = att["fused"]["seq_len"], att["fused"]["heads"], att["fused"]["width"]
assert att["fused"]["saved_floats_per_sample"] == 3 * T * D + H * T, att["fused"]
assert att["materialized"]["saved_floats_per_sample"] == 3 * T * D + H * T * T, att["materialized"]
assert att["fused"]["step_bytes"] < att["materialized"]["step_bytes"], att
PY

# The char-GPT: 4 blocks as one row, every parameter counted (the hand count is in
# tests/engine/test_transformer.cpp).
if [ -d /usr/share/games/fortunes ]; then
    check validate_gpt 0 'total: 867,328 parameters' -- "$paralab" validate "$examples/gpt-char.paralab.json"
    check validate_gpt_repeat 0 'transformer_block x4' -- "$paralab" validate "$examples/gpt-char.paralab.json"
fi

# Every shipped example validates and runs a few steps (Fashion-MNIST ones when it is installed).
for f in "$examples"/*.paralab.json; do
    n=$(basename "$f" .paralab.json)
    check "validate_$n" 0 'total:' -- "$paralab" validate "$f"
    if grep -q fashion-mnist "$f" && [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
        echo "skip example_$n: Fashion-MNIST is not installed"; continue
    fi
    if grep -q '"text"' "$f" && [ ! -d /usr/share/games/fortunes ]; then
        echo "skip example_$n: fortunes is not installed"; continue
    fi
    check "example_$n" 0 '"status":"finished"' -- "$paralab" run "$f" --steps 3 --json
done

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
