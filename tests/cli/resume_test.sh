#!/usr/bin/env bash
# `paralab run --resume RUN_ID` (docs/experiment-format.md): a run killed (SIGKILL) once it has
# stored a checkpoint, then resumed, ends as the run that was never killed: the same final loss
# in --json, the same stored final parameters, each step once in its records. A run without
# checkpoints, a finished run and a corrupt checkpoint are refused with their reason (a FIFO
# named as a newer checkpoint too, at once). `export --weights` writes through a symbolic link,
# keeps a file's mode and refuses a FIFO. A
# tensor_parallel run and a hybrid run (dp2·tp2 at zero 1) killed and resumed end as their runs
# never killed too.
# Waits are conditions polled with a bound, never fixed sleeps.
# Usage: resume_test.sh PARALAB
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
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; tail -5 "$tmp/err" 2>/dev/null; failed=$((failed + 1)); }
json_field() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$@"; }

# Two devices (ddp), 3000 steps, a checkpoint every 20. A straggler's 2 ms a step (timing
# only: ddp's result is the same) keeps the run going for seconds after its second checkpoint,
# so that on a loaded machine it is killed while it trains, not after it ended.
cat >"$tmp/e.paralab.json" <<'EOF'
{"paralab": 1, "name": "resume-test", "seed": 3,
 "data": {"dataset": "spirals", "samples": 4000, "classes": 3, "batch_size": 64},
 "model": {"input": [2], "layers": [{"type": "linear", "out": 64}, {"type": "relu"},
                                    {"type": "linear", "out": 64}, {"type": "relu"},
                                    {"type": "linear", "out": 3}], "loss": "cross_entropy"},
 "devices": ["cpu:0", "cpu:1"],
 "strategy": {"type": "ddp", "straggler": {"device": "cpu:1", "delay_ms": 2}},
 "optimizer": {"type": "adam", "lr": 0.01}, "schedule": {"type": "cosine", "warmup_steps": 20},
 "train": {"epochs": 100, "max_steps": 3000, "checkpoint_every": 20}}
EOF

# whole_then_killed NAME FILE: FILE run whole (whole_id, whole_loss), then run again and killed
# (SIGKILL) once its second checkpoint (step 40) exists (killed_id, its checkpoint folder;
# bounded wait: 120 s).
whole_then_killed() {
    local name=$1 file=$2
    "$paralab" run "$file" --db "$db" --json >"$tmp/whole" 2>"$tmp/err" || fail "$name: uninterrupted run"
    whole_id=$(json_field "$tmp/whole" run_id)
    whole_loss=$(json_field "$tmp/whole" final_loss)
    "$paralab" run "$file" --db "$db" --json >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    killed_id=$((whole_id + 1))
    folder="$tmp/checkpoints/runs.db/run-$killed_id"
    for _ in $(seq 12000); do
        [ -e "$folder/step-40.safetensors" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.01
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
    if [ -s "$tmp/out" ]; then fail "$name: the run ended before it could be killed"; fi
}

whole_then_killed ddp "$tmp/e.paralab.json"
"$paralab" runs show "$killed_id" --db "$db" --json >"$tmp/show" 2>&1
grep -q '"status": "interrupted"' "$tmp/show" && ok "killed run is interrupted" || fail "killed run not interrupted"
last_stored=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT MAX(step) FROM records WHERE run_id=?", (int(sys.argv[2]),)).fetchone()[0] or 0)' "$db" "$killed_id")

# No checkpoint: a clear error, and the run stays as it was.
mv "$folder" "$tmp/kept"
"$paralab" run --resume "$killed_id" --db "$db" --json >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && grep -q "has no checkpoint" "$tmp/err" && ok "resume without a checkpoint refused" || fail "no-checkpoint resume: exit $rc"
mv "$tmp/kept" "$folder"

# The newest checkpoint spoiled: refused with its reason, the one before used.
# (A temporary file of the checkpoint being written when the run was killed is not one.)
newest=$(ls "$folder" | grep -E '^step-[0-9]+\.safetensors$' | sort -t- -k2 -n | tail -1)
count=$(ls "$folder" | grep -cE '^step-[0-9]+\.safetensors$')
[ "$count" -ge 2 ] || fail "the killed run left $count checkpoints; expected 2 or more"
printf 'not a checkpoint' >"$folder/$newest"
mkfifo "$folder/step-99999.safetensors"
timeout 600 "$paralab" run --resume "$killed_id" --db "$db" --json >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 0 ] || fail "resume: exit $rc"
grep -q "checkpoint .*$newest refused" "$tmp/err" && ok "corrupt checkpoint refused" || fail "corrupt checkpoint not reported"
grep -q "checkpoint .*step-99999.safetensors refused: .* is a FIFO, not a regular file" "$tmp/err" \
    && ok "a FIFO as the newest checkpoint refused" || fail "FIFO checkpoint not reported"
rm -f "$folder/step-99999.safetensors"
[ "$(json_field "$tmp/out" run_id)" = "$killed_id" ] && ok "same run id" || fail "run id changed"
[ "$(json_field "$tmp/out" status)" = finished ] && ok "resumed run finished" || fail "resumed run not finished"
[ "$(json_field "$tmp/out" final_loss)" = "$whole_loss" ] && ok "final loss equal ($whole_loss)" || fail "final loss $(json_field "$tmp/out" final_loss) != $whole_loss"
[ "$(json_field "$tmp/out" steps)" = 3000 ] && ok "3000 steps" || fail "steps"
"$paralab" runs show "$killed_id" --db "$db" --json >"$tmp/show" 2>&1
grep -q '"status": "finished"' "$tmp/show" && ok "stored as finished" || fail "not stored as finished"

# Each step at most once in the records, every step from the resumed checkpoint on: the killed
# run had stored its steps up to $last_stored (a killed process loses the records it had queued).
resumed_from=$(sed -n 's/.*resumed run [0-9]* from step \([0-9]*\).*/\1/p' "$tmp/err")
python3 - "$db" "$killed_id" "${resumed_from:-0}" "$last_stored" <<'EOF' && ok "records: each step once (stored to $last_stored, resumed from $resumed_from)" || fail "records"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
k, stored = int(sys.argv[3]), int(sys.argv[4])
assert k > 0
rows = dict(c.execute("SELECT step, COUNT(*) FROM records WHERE run_id=? GROUP BY step", (int(sys.argv[2]),)).fetchall())
assert all(n == 2 for n in rows.values()), "a step recorded twice"
assert all(s in rows for s in range(k + 1, 3001)), "steps after the checkpoint missing"
assert all(s in rows for s in range(1, min(k, stored) + 1)), "steps before the checkpoint lost"
EOF

# The stored final parameters: the last checkpoints of both runs, tensor by tensor.
python3 - "$tmp/checkpoints/runs.db/run-$whole_id/step-3000.safetensors" "$folder/step-3000.safetensors" <<'EOF' \
    && ok "final parameters equal bit for bit" || fail "final parameters differ"
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = b[8 + n:]
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys() and any(k.startswith("layers.") for k in a), sorted(a)[:5]
assert all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]]
EOF

# A finished run does not resume.
"$paralab" run --resume "$killed_id" --db "$db" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && grep -q "already finished" "$tmp/err" && ok "finished run refused" || fail "finished run: exit $rc"

# Bad arguments: each refused with its cause, exit 2.
refused() {  # refused NAME EXPECTED_TEXT ARGS...
    local name=$1 text=$2
    shift 2
    "$paralab" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" = 2 ] && grep -q -- "$text" "$tmp/err" && ok "$name" || fail "$name: exit $rc"
}
refused "unknown run refused" "run 999 is not in the store" run --resume 999 --db "$db"
refused "neither file nor --resume" "give an experiment file, or --resume" run --db "$db"
refused "--resume with --steps" "do not go with it" run --resume "$killed_id" --steps 5 --db "$db"

# export: the latest checkpoint's parameters, which `run --init` reads.
"$paralab" export "$killed_id" --weights "$tmp/w.safetensors" --db "$db" 2>"$tmp/err" \
    && "$paralab" run "$tmp/e.paralab.json" --init "$tmp/w.safetensors" --steps 1 --db "$db" >/dev/null 2>>"$tmp/err" \
    && ok "export, then run --init" || fail "export"
python3 - "$tmp/w.safetensors" "$folder/step-3000.safetensors" <<'EOF' && ok "exported parameters are the checkpoint's" || fail "exported parameters differ"
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = b[8 + n:]
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}
w, c = tensors(sys.argv[1]), tensors(sys.argv[2])
assert set(w) == {k for k in c if not k.startswith("optim.")}, (sorted(w), sorted(c))
assert all(w[k] == c[k] for k in w)
EOF

# export --weights through a symbolic link: its target written, the link kept, a private file
# still private; a FIFO refused and left as it was.
ln -s w.safetensors "$tmp/link.safetensors"
chmod 600 "$tmp/w.safetensors"
"$paralab" export "$killed_id" --weights "$tmp/link.safetensors" --db "$db" 2>"$tmp/err" \
    && [ -L "$tmp/link.safetensors" ] && [ "$(stat -c %a "$tmp/w.safetensors")" = 600 ] \
    && ok "export through a link keeps the link and the file's mode" || fail "export through a link"
mkfifo "$tmp/fifo.safetensors"
timeout 120 "$paralab" export "$killed_id" --weights "$tmp/fifo.safetensors" --db "$db" 2>"$tmp/err"
rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] && [ -p "$tmp/fifo.safetensors" ] && grep -q "fifo.safetensors is a FIFO, not a regular file: not replaced" "$tmp/err" \
    && ok "export refuses a FIFO" || fail "export over a FIFO: exit $rc"

# generate: a text model's latest parameters; a model of another data set is refused.
"$paralab" generate "$killed_id" --prompt hi --tokens 5 --db "$db" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && grep -q "not a text model" "$tmp/err" && ok "generate refuses a spirals run" || fail "generate on spirals: exit $rc"
cat >"$tmp/text.paralab.json" <<'EOF'
{"paralab": 1, "name": "text", "seed": 1, "data": {"dataset": "text", "seq_len": 16, "batch_size": 4, "test_limit": 16},
 "model": {"input": [16], "layers": [{"type": "embedding", "vocab": 256, "dim": 16}, {"type": "position_embedding"},
           {"type": "transformer_block", "heads": 2, "ffn": 32}, {"type": "layernorm"}, {"type": "linear", "out": 256}],
           "loss": "cross_entropy"},
 "devices": ["cpu:0"], "strategy": {"type": "single"}, "optimizer": {"type": "adamw", "lr": 0.001},
 "train": {"epochs": 1, "max_steps": 3}}
EOF
"$paralab" run "$tmp/text.paralab.json" --db "$db" --json >"$tmp/out" 2>"$tmp/err"
text_id=$(json_field "$tmp/out" run_id)
"$paralab" generate "$text_id" --prompt "To be" --tokens 12 --temperature 0 --db "$db" >"$tmp/gen" 2>"$tmp/err"
rc=$?
[ "$rc" = 0 ] && python3 -c 'import sys; t=open(sys.argv[1]).read().rstrip("\n"); assert t.startswith("To be") and len(t) == 17, repr(t)' "$tmp/gen" \
    && ok "generate: 12 bytes after the prompt" || fail "generate: exit $rc"

# tensor_parallel over two devices: each device holds its slices of the blocks, a checkpoint the
# whole model. Killed once its second checkpoint exists, resumed: the run never killed, bit for bit.
python3 -c 'import sys
with open(sys.argv[1], "w") as f:
    for i in range(200): f.write("Heads split over two devices, killed and resumed, line %d.\n" % i)' "$tmp/tp.txt"
cat >"$tmp/tp.paralab.json" <<EOF
{"paralab": 1, "name": "resume-tp", "seed": 5,
 "data": {"dataset": "text", "path": "$tmp/tp.txt", "seq_len": 16, "batch_size": 8, "test_limit": 16},
 "model": {"input": [16], "layers": [{"type": "embedding", "vocab": 256, "dim": 16}, {"type": "position_embedding"},
           {"type": "transformer_block", "heads": 4, "ffn": 32, "repeat": 2}, {"type": "layernorm"},
           {"type": "linear", "out": 256}], "loss": "cross_entropy"},
 "devices": ["cpu:0", "cpu:1"],
 "strategy": {"type": "tensor_parallel", "straggler": {"device": "cpu:1", "delay_ms": 2}},
 "optimizer": {"type": "adamw", "lr": 0.003}, "schedule": {"type": "cosine", "warmup_steps": 20},
 "train": {"epochs": 100, "max_steps": 1000, "checkpoint_every": 20}}
EOF
# kill_and_resume NAME FILE STEPS: FILE run whole, then again and killed (whole_then_killed),
# and resumed: it must end as the whole run (finished, STEPS steps, the same final loss, its
# final checkpoint's parameters and optimizer state bit for bit), and its checkpoint hold the
# whole model (export, then --init on one device).
kill_and_resume() {
    local name=$1 file=$2 steps=$3 whole_id whole_loss killed_id folder rc from
    whole_then_killed "$name" "$file"
    "$paralab" run --resume "$killed_id" --db "$db" --json >"$tmp/out" 2>"$tmp/err"
    rc=$?
    from=$(sed -n 's/.*resumed run [0-9]* from step \([0-9]*\).*/\1/p' "$tmp/err")
    [ "$rc" = 0 ] && [ -n "$from" ] && ok "$name: killed run resumed from step $from" || fail "$name: resume exit $rc"
    [ "$(json_field "$tmp/out" status)" = finished ] && [ "$(json_field "$tmp/out" steps)" = "$steps" ] \
        && ok "$name: resumed run finished its $steps steps" || fail "$name: resumed run not finished"
    [ "$(json_field "$tmp/out" final_loss)" = "$whole_loss" ] && ok "$name: final loss equal ($whole_loss)" \
        || fail "$name: final loss $(json_field "$tmp/out" final_loss) != $whole_loss"
    python3 - "$tmp/checkpoints/runs.db/run-$whole_id/step-$steps.safetensors" "$folder/step-$steps.safetensors" <<'PY' \
        && ok "$name: final parameters and optimizer state equal bit for bit" || fail "$name: final checkpoints differ"
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = b[8 + n:]
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys() and any(k.startswith("optim.layers.") for k in a), sorted(a)[:5]
assert all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]]
PY
    "$paralab" export "$killed_id" --weights "$tmp/$name.safetensors" --db "$db" 2>"$tmp/err" \
        && "$paralab" run "$file" --init "$tmp/$name.safetensors" --devices cpu:0 --strategy single \
            --steps 1 --db "$db" >/dev/null 2>>"$tmp/err" \
        && ok "$name: export, then run --init on one device" || fail "$name: export or --init"
}
kill_and_resume tensor_parallel "$tmp/tp.paralab.json" 1000

# hybrid dp2·tp2 at zero 1 over four devices: each holds its slices of the blocks and 1/2 of their
# optimizer state, a checkpoint the whole model and state. Killed once its second checkpoint
# exists, resumed: the run never killed, bit for bit.
python3 - "$tmp/tp.paralab.json" "$tmp/hy.paralab.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))  # the tensor_parallel case's model, data and optimizer
e.update(name="resume-hybrid", seed=6, devices=["cpu:0", "cpu:1", "cpu:2", "cpu:3"],
         strategy={"type": "hybrid", "dp": 2, "tp": 2, "zero": 1, "straggler": {"device": "cpu:3", "delay_ms": 2}})
e["train"]["max_steps"] = 600
json.dump(e, open(sys.argv[2], "w"))
PY
kill_and_resume hybrid "$tmp/hy.paralab.json" 600

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
