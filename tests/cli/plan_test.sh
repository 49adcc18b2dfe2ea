#!/usr/bin/env bash
# `paralab plan` as a user meets it (docs/planner.md): the --json object with every key of
# docs/planner.md's JSON output, a sweep's array, --compare against a recorded run, and exit 2 with
# one clear line on bad input.
# Usage: plan_test.sh PARALAB EXAMPLES_DIR
set -u
paralab=$1
examples=$2
gpt3="$examples/plan/gpt3-175b.plan.paralab.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_DATA_HOME="$tmp/data"  # the calibration is read and written here, not in the user's home
passed=0
failed=0

check() {  # check NAME EXPECTED_CODE EXPECTED_TEXT -- command...
    local name=$1 code=$2 text=$3
    shift 4
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" != "$code" ]; then
        echo "FAIL $name: exit $rc, expected $code"; cat "$tmp/out" "$tmp/err"; failed=$((failed + 1)); return
    fi
    if [ -n "$text" ] && ! grep -qF -- "$text" "$tmp/out" "$tmp/err"; then
        echo "FAIL $name: output lacks '$text'"; cat "$tmp/out" "$tmp/err"; failed=$((failed + 1)); return
    fi
    if grep -qiE "terminate called|core dumped|Segmentation|what\(\)" "$tmp/err"; then
        echo "FAIL $name: crashed"; cat "$tmp/err"; failed=$((failed + 1)); return
    fi
    echo "ok   $name"; passed=$((passed + 1))
}

goodput=(--failure-rate 1.97e-5 --storage-gbps 2000 --restart-s 600)

# One configuration: every key of the contract.
check plan_json 0 '"step_time_s"' -- "$paralab" plan "$gpt3" --json
for key in devices step_time_s tokens_per_s samples_per_s mfu fits memory_bytes parameters gradients \
           optimizer_state activations communication workspace total breakdown_s compute recompute \
           tp_comm pp_bubble pp_comm dp_comm optimizer; do
    if grep -qF "\"$key\"" "$tmp/out"; then passed=$((passed + 1)); else
        echo "FAIL plan_json: no key $key"; failed=$((failed + 1)); fi
done
check plan_devices 0 '"devices": 1024' -- "$paralab" plan "$gpt3" --json
check plan_report 0 'where one step goes' -- "$paralab" plan "$gpt3"
check plan_h100 0 '"fits"' -- "$paralab" plan "$gpt3" --cluster h100-80g --json

# A sweep: an array, one object per configuration that can run, with its values under "config".
check plan_sweep_json 0 '"config"' -- "$paralab" plan "$gpt3" --sweep recompute=none,selective,full --json
if [ "$(head -c 1 "$tmp/out")" = "[" ]; then passed=$((passed + 1)); else
    echo "FAIL plan_sweep_json: not an array"; failed=$((failed + 1)); fi
# Materialized attention scores (the 2021 stack) do not fit without recomputation.
check plan_sweep_table 0 'OOM' -- "$paralab" plan "$gpt3" --stack megatron-lm-2021 --sweep recompute=none,full --sweep zero=0,1
check plan_stack_unknown 2 'unknown stack "megatron"; the presets are ideal, megatron-lm-2021, paralab' -- "$paralab" plan "$gpt3" --stack megatron
check plan_stack_report 0 'stack megatron-lm-2021' -- "$paralab" plan "$gpt3" --stack megatron-lm-2021
check plan_stack_json 0 '"stack": "megatron-lm-2021"' -- "$paralab" plan "$gpt3" --stack megatron-lm-2021 --json
check plan_sweep_skipped 0 'tp=5: heads (96) not divisible by tp (5)' -- "$paralab" plan "$gpt3" --nodes 80 --sweep tp=5,8 --sweep micro_batches=96 --show-skipped
check plan_sweep_skipped_count 0 '1 configuration skipped (--show-skipped' -- "$paralab" plan "$gpt3" --nodes 80 --sweep tp=5,8 --sweep micro_batches=96
if grep -qF 'not divisible' "$tmp/out" "$tmp/err"; then echo "FAIL plan_sweep_skipped_count: listed without --show-skipped"; failed=$((failed + 1)); else passed=$((passed + 1)); fi
# A mesh sweep derives dp from the devices: 1,024 / (tp 4 · pp 8) = 32, and the micro-batches
# follow (96 of 1 row at dp 16: 48 at dp 32).
check plan_sweep_dp 0 '"dp": 32' -- "$paralab" plan "$gpt3" --sweep tp=4,8 --json
if grep -qF '"micro_batches": 48' "$tmp/out"; then passed=$((passed + 1)); else echo "FAIL plan_sweep_dp: micro_batches do not follow dp"; failed=$((failed + 1)); fi
check plan_rank_mfu 0 '"mfu"' -- "$paralab" plan "$gpt3" --sweep pp=4,8,16 --rank mfu --json
if python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); m=[o["mfu"] for o in a if o["fits"]]; sys.exit(0 if m == sorted(m, reverse=True) else 1)' "$tmp/out"; then passed=$((passed + 1)); else echo "FAIL plan_rank_mfu: not by MFU"; failed=$((failed + 1)); fi
check plan_rank_time 0 'days to train' -- "$paralab" plan "$gpt3" --sweep pp=4,8,16 --rank time_to_train "${goodput[@]}" --tokens 3e11
check plan_rank_time_no_tokens 2 '--rank: time_to_train needs the goodput options and --tokens N' -- "$paralab" plan "$gpt3" --sweep pp=4,8 --rank time_to_train
check plan_rank_unknown 2 '--rank' -- "$paralab" plan "$gpt3" --sweep pp=4,8 --rank speed

# Goodput: the contract's keys, and the cost where the cluster gives a price (h100-80g does).
llama="$examples/plan/llama3-405b.plan.paralab.json"
check plan_goodput 0 '"goodput"' -- "$paralab" plan "$llama" --cluster h100-80g --nodes 2048 "${goodput[@]}" --tokens 15.6e12 --json
for key in checkpoint_interval_s time_to_train_s cost checkpoint_bytes; do
    if grep -qF "\"$key\"" "$tmp/out"; then passed=$((passed + 1)); else
        echo "FAIL plan_goodput: no key $key"; failed=$((failed + 1)); fi
done
check plan_goodput_report 0 'checkpoint interval' -- "$paralab" plan "$llama" --cluster h100-80g --nodes 2048 "${goodput[@]}"
check plan_goodput_no_price 0 '"goodput"' -- "$paralab" plan "$gpt3" "${goodput[@]}" --tokens 3e11 --json
if grep -qF '"cost"' "$tmp/out"; then echo "FAIL plan_goodput_no_price: a cost without a price"; failed=$((failed + 1)); else passed=$((passed + 1)); fi
check plan_goodput_sweep 0 '"time_to_train_s"' -- "$paralab" plan "$gpt3" "${goodput[@]}" --tokens 3e11 --sweep recompute=selective,full --json
check plan_goodput_rate 2 '--failure-rate: expected a failure rate per GPU-hour above 0' -- "$paralab" plan "$gpt3" --failure-rate 0 --storage-gbps 100 --restart-s 60
check plan_goodput_storage 2 '--storage-gbps: expected' -- "$paralab" plan "$gpt3" --failure-rate 1e-5 --storage-gbps -3 --restart-s 60
check plan_goodput_partial 2 '--storage-gbps: missing' -- "$paralab" plan "$gpt3" --failure-rate 1e-5 --restart-s 60
check plan_goodput_no_price_cost 2 'gives no price_per_gpu_hour' -- "$paralab" plan "$gpt3" "${goodput[@]}" --tokens 3e11 --cost
check plan_goodput_price 0 '"cost"' -- "$paralab" plan "$gpt3" "${goodput[@]}" --tokens 3e11 --cost --price-per-gpu-hour 2 --json

# Bad input: exit 2 and the cause.
check plan_unknown_preset 2 'unknown cluster preset "a200"' -- "$paralab" plan "$gpt3" --cluster a200
check plan_mesh_size 2 'but the cluster has 24' -- "$paralab" plan "$gpt3" --nodes 3
check plan_cluster_overflow 2 "--nodes: nodes × gpus_per_node = 1000000 × 4096 = 4096000000 devices; a cluster has at most 1048576" -- "$paralab" plan "$gpt3" --nodes 1000000 --gpus-per-node 4096
check plan_sweep_key 2 'unknown sweep key "tensor"' -- "$paralab" plan "$gpt3" --sweep tensor=1,2
check plan_sweep_value 2 'tp=x' -- "$paralab" plan "$gpt3" --sweep tp=x
echo '{"name": "mine", "peak_tflops_16bit": 100, "memory_gb": "lots"}' >"$tmp/cluster.json"
check plan_cluster_file 2 'memory_gb: expected' -- "$paralab" plan "$gpt3" --cluster "$tmp/cluster.json"
echo '{"name": ' >"$tmp/broken.json"
check plan_cluster_syntax 2 'not valid JSON' -- "$paralab" plan "$gpt3" --cluster "$tmp/broken.json"
sed 's/"tp": 8/"tp": 0/' "$gpt3" >"$tmp/bad-tp.paralab.json"
check plan_bad_hybrid 2 'bad-tp.paralab.json: strategy.tp: expected an integer from 1' -- "$paralab" plan "$tmp/bad-tp.paralab.json"
check plan_missing_file 2 'cannot open' -- "$paralab" plan "$tmp/none.paralab.json"
cat >"$tmp/cluster.json" <<'JSON'
{"name": "mine", "nodes": 2, "gpus_per_node": 4, "peak_tflops_16bit": 100, "memory_gb": 40,
 "memory_bandwidth_gbps": 1500, "intra_node_bandwidth_gbps": 100, "inter_node_bandwidth_gbps": 12.5}
JSON
# A preset without --nodes takes the devices the mesh needs: single is one device.
check plan_local_single 0 '"devices": 1,' -- "$paralab" plan "$examples/gpt-char.paralab.json" --cluster local --json
check plan_cluster_ok 0 '"devices": 8' -- "$paralab" plan "$examples/gpt-char.paralab.json" --cluster "$tmp/cluster.json" --json --sweep dp=8

# The local preset from this machine's calibration (the user's data folder).
check calibrate 0 'kept in' -- "$paralab" bench --calibrate
check plan_local_calibrated 0 'on local (calibrated)' -- "$paralab" plan "$examples/gpt-char.paralab.json" --cluster local
echo '{"gemm_gflops_fp32": "fast"}' >"$tmp/data/ParaLab/calibration.json"
check plan_local_bad_calibration 2 'calibration.json: gemm_gflops_fp32' -- "$paralab" plan "$examples/gpt-char.paralab.json" --cluster local

# --compare: a short real run recorded into a temporary store, its plan beside it. Only that both
# sides are printed and the errors are finite is checked: timing depends on the machine.
rm -f "$tmp/data/ParaLab/calibration.json"  # the default rates, not the broken file above
runs="$tmp/runs.db"
check compare_record 0 'finished after 30 steps' -- "$paralab" run "$examples/spirals-mlp.paralab.json" --db "$runs" --steps 30
check compare_text 0 'peak memory (busiest)' -- "$paralab" plan --compare 1 --db "$runs"
for text in 'predicted' 'measured' 'step time (s)' 'samples/s'; do
    if grep -qF -- "$text" "$tmp/out"; then passed=$((passed + 1)); else
        echo "FAIL compare_text: no '$text'"; failed=$((failed + 1)); fi
done
check compare_json 0 '"run_id": 1' -- "$paralab" plan --compare 1 --db "$runs" --json
for key in predicted measured error step_time_s peak_memory_bytes samples_per_s; do
    if grep -qF "\"$key\"" "$tmp/out"; then passed=$((passed + 1)); else
        echo "FAIL compare_json: no key $key"; failed=$((failed + 1)); fi
done
for key in step_time memory; do  # a finite number, not null
    if grep -qE "\"$key\": -?[0-9][0-9.e+-]*,?\$" "$tmp/out"; then passed=$((passed + 1)); else
        echo "FAIL compare_json: error.$key is not a finite number"; cat "$tmp/out"; failed=$((failed + 1)); fi
done
check compare_unknown_run 2 'run 9 is not in' -- "$paralab" plan --compare 9 --db "$runs"
check compare_with_file 2 'do not go with it' -- "$paralab" plan "$gpt3" --compare 1 --db "$runs"
check compare_missing_store 2 'none.db' -- "$paralab" plan --compare 1 --db "$tmp/none.db"
check compare_param_server_record 0 '' -- "$paralab" run "$examples/spirals-param-server-straggler.paralab.json" --db "$runs" --steps 3
check compare_unmodelled 2 'not param_server' -- "$paralab" plan --compare 2 --db "$runs"
# A run that has not ended (its process gone, so it reads back `interrupted`): no summary.
cp "$runs" "$tmp/running.db"
if command -v sqlite3 >/dev/null; then
    sqlite3 "$tmp/running.db" "UPDATE runs SET status = 'running', summary = NULL WHERE run_id = 1"
    check compare_running 2 'run 1 has no summary (status' -- "$paralab" plan --compare 1 --db "$tmp/running.db"
fi
# --cluster names the cluster the run's devices are: a GPU run needs one (the local cluster is
# this machine's CPU), and any run can be planned on one.
check compare_on_cluster 0 '"cluster": "h100-80g"' -- "$paralab" plan --compare 1 --db "$runs" --cluster h100-80g --json
cp "$runs" "$tmp/gpu.db"
if command -v sqlite3 >/dev/null; then
    sqlite3 "$tmp/gpu.db" "UPDATE runs SET config = json_set(config, '$.devices', json_array('cuda:0')) WHERE run_id = 1"
    check compare_gpu_run_local 2 'ran on cuda:0, and the local cluster' -- "$paralab" plan --compare 1 --db "$tmp/gpu.db"
    check compare_gpu_run_h100 0 'against its plan on h100-80g' -- "$paralab" plan --compare 1 --db "$tmp/gpu.db" --cluster h100-80g
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
