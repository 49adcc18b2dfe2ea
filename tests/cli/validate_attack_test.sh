#!/usr/bin/env bash
# `paralab validate` and `paralab run` on hostile experiment files (docs/experiment-format.md,
# "Limits"): a clear one-line error naming the file and the JSON path, never a crash, a wrapped
# number or a whole echo of the hostile text; a model too large for the memory refused by both
# before anything is allocated (PARALAB_AVAILABLE_MEMORY rehearses a smaller machine).
# Usage: validate_attack_test.sh PARALAB EXAMPLES_DIR
set -u
paralab=$1
examples=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_DATA_HOME="$tmp/data"
passed=0
failed=0

check() {  # check NAME EXPECTED_CODE EXPECTED_TEXT -- command...
    local name=$1 code=$2 text=$3
    shift 4
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" != "$code" ]; then
        echo "FAIL $name: exit $rc, expected $code"; head -c 600 "$tmp/err"; echo; failed=$((failed + 1)); return
    fi
    if [ -n "$text" ] && ! grep -qF -- "$text" "$tmp/out" "$tmp/err"; then
        echo "FAIL $name: output lacks '$text'"; head -c 600 "$tmp/out" "$tmp/err"; echo; failed=$((failed + 1)); return
    fi
    if grep -qiE "terminate called|core dumped|Segmentation|what\(\)|\(check .* failed at " "$tmp/out" "$tmp/err"; then
        echo "FAIL $name: crashed or an internal check"; head -c 600 "$tmp/err"; failed=$((failed + 1)); return
    fi
    if [ "$(wc -c <"$tmp/err")" -gt 1000 ]; then
        echo "FAIL $name: a message of $(wc -c <"$tmp/err") bytes"; failed=$((failed + 1)); return
    fi
    echo "ok   $name"; passed=$((passed + 1))
}

good="$examples/spirals-mlp.paralab.json"
edit() {  # edit OUT PYTHON-STATEMENTS: j is the good file's JSON
    python3 -c "import json, sys; j = json.load(open(sys.argv[1])); $2
json.dump(j, open(sys.argv[2], 'w'))" "$good" "$tmp/$1.paralab.json"
}

printf '{"paralab": 1,\n  "seed": 1e99999}\n' >"$tmp/number.paralab.json"
check number_position 2 "number.paralab.json:2:11: number out of range (1e99999" -- "$paralab" validate "$tmp/number.paralab.json"
python3 -c 'import sys; open(sys.argv[1], "w").write("{\"name\": \"" + "x" * 5000000 + "\n")' "$tmp/unclosed.paralab.json"
check unclosed_string 2 "unclosed.paralab.json:1:" -- "$paralab" validate "$tmp/unclosed.paralab.json"
edit long_name 'j["name"] = "n" * 10000000'
check long_name 2 "name: expected at most 256 characters, got 10000000" -- "$paralab" validate "$tmp/long_name.paralab.json"
edit long_device 'j["devices"] = ["cpu:0", "cpu:" + "1" * 1000000]'
check long_device 2 'devices[1]: expected a device name such as "cpu:0"' -- "$paralab" validate "$tmp/long_device.paralab.json"
edit many_devices 'j["devices"] = ["cpu:%d" % i for i in range(5000)]; j["strategy"] = {"type": "ddp"}'
check many_devices 2 "devices: expected at most 1024 devices, got 5000" -- "$paralab" run "$tmp/many_devices.paralab.json"
edit many_layers 'j["model"]["layers"].insert(0, {"type": "residual", "repeat": 100000, "layers": [{"type": "relu"}] * 1000})'
check many_layers 2 "model.layers[0]: the model passes 100000 layers in all" -- "$paralab" validate "$tmp/many_layers.paralab.json"
edit big_weight 'j["model"]["layers"] = [{"type": "linear", "out": 2**31}, {"type": "linear", "out": 2**31}, {"type": "linear", "out": 3}]'
check big_weight 2 "big_weight.paralab.json: model.layers[1] (linear): its parameter weight [2147483648, 2147483648] passes 2^40 elements" -- "$paralab" validate "$tmp/big_weight.paralab.json"
check big_weight_run 2 "model.layers[1] (linear): its parameter weight" -- "$paralab" run "$tmp/big_weight.paralab.json"
# 10^11 parameters (1.5 TiB with Adam): refused from the meta device's summary, nothing allocated.
edit huge_model 'j["model"]["layers"] = [{"type": "linear", "out": 316228}, {"type": "linear", "out": 316228}, {"type": "linear", "out": 3}]'
PARALAB_AVAILABLE_MEMORY=64G check huge_model 2 " GiB per device, 64.0 GiB available" -- "$paralab" validate "$tmp/huge_model.paralab.json"
PARALAB_AVAILABLE_MEMORY=64G check huge_model_run 2 " GiB per device, 64.0 GiB available" -- "$paralab" run "$tmp/huge_model.paralab.json"
# The spirals MLP needs about 100 KiB: refused by both with 64 KiB, run with 1 MiB.
PARALAB_AVAILABLE_MEMORY=64K check small_machine_validate 2 "GiB per device, 0.00 GiB available" -- "$paralab" validate "$good"
PARALAB_AVAILABLE_MEMORY=64K check small_machine_run 2 "GiB per device, 0.00 GiB available" -- "$paralab" run "$good" --steps 2
PARALAB_AVAILABLE_MEMORY=1M check small_machine_fits 0 '"status":"finished"' -- "$paralab" run "$good" --steps 2 --json
PARALAB_AVAILABLE_MEMORY=lots check bad_variable 2 "PARALAB_AVAILABLE_MEMORY: expected a number of bytes" -- "$paralab" validate "$good"
# micro_batches declares no maximum: 2^31 - 1 at most (the strategy counts in an int).
sed 's/"micro_batches": 4/"micro_batches": 1099511627776/' "$examples/spirals-pipeline.paralab.json" >"$tmp/micro.paralab.json"
check micro_batches 2 "strategy.micro_batches: expected an integer from 1 to 2147483647, got 1099511627776" -- "$paralab" run "$tmp/micro.paralab.json" --steps 2
sed 's/"micro_batches": 4/"micro_batches": 2147483647/' "$examples/spirals-pipeline.paralab.json" >"$tmp/micro_max.paralab.json"
check micro_batches_max 2 "strategy.micro_batches: 2147483647 micro-batches, but data.batch_size 64 has 64 rows; at most 64" -- "$paralab" run "$tmp/micro_max.paralab.json" --steps 2 --json
edit epochs 'j["train"]["epochs"] = 2**63 - 1'
check huge_epochs_validate 0 "total:" -- "$paralab" validate "$tmp/epochs.paralab.json"
check huge_epochs_run 0 '"steps":2' -- "$paralab" run "$tmp/epochs.paralab.json" --steps 2 --json

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
