#!/usr/bin/env bash
# `paralab run FILE --init WEIGHTS.safetensors` (docs/experiment-format.md): the run starts from
# the file's parameters, and a file that does not fit the model is refused before any step,
# naming the tensor and both shapes; so are a NaN in a weight (naming the tensor) and a FIFO
# given as the file (at once: a run that blocks is stopped by a generous ceiling and fails). The weights are written here from the safetensors
# specification with Python's standard library: all zero, so that the first step's loss of the
# three-class spirals MLP is exactly ln 3 = 1.0986.
# Usage: init_test.sh PARALAB EXAMPLES_DIR
set -u
paralab=$1
examples=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_DATA_HOME="$tmp/data"
failed=0
fail() { echo "FAIL $1"; tail -20 "$tmp/out" "$tmp/err"; failed=$((failed + 1)); }

# write_zeros FILE NAME:ROWSxCOLS...: F32 zeros of those shapes, in the layout of the spec.
write_zeros() {
    python3 - "$@" <<'PY'
import json, struct, sys
path, specs = sys.argv[1], sys.argv[2:]
header, offset = {}, 0
for s in specs:
    name, dims = s.split(":")
    shape = [int(d) for d in dims.split("x")]
    n = 4
    for d in shape: n *= d
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
    offset += n
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + bytes(offset))
PY
}
if ! command -v python3 >/dev/null; then echo "SKIPPED: python3 is not installed"; exit 77; fi

good="$examples/spirals-mlp.paralab.json"  # linear 64, relu, linear 64, relu, linear 3 on [2]
write_zeros "$tmp/zeros.safetensors" layers.0.weight:64x2 layers.0.bias:64 layers.2.weight:64x64 \
    layers.2.bias:64 layers.4.weight:3x64 layers.4.bias:3
"$paralab" run "$good" --init "$tmp/zeros.safetensors" --steps 1 --json --db "$tmp/runs.db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc != 0 ]; then fail "init: exit $rc"
elif ! grep -q '"final_loss":1.0986' "$tmp/out"; then fail "init: the first loss is not ln 3"
fi

write_zeros "$tmp/wrong.safetensors" layers.0.weight:64x3 layers.0.bias:64 layers.2.weight:64x64 \
    layers.2.bias:64 layers.4.weight:3x64 layers.4.bias:3
"$paralab" run "$good" --init "$tmp/wrong.safetensors" --steps 1 --db "$tmp/runs.db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ]; then fail "wrong shape: exit 0"
elif ! grep -q 'tensor "layers.0.weight" has shape \[64, 3\] in the file, the model.s is \[64, 2\]' "$tmp/err"; then
    fail "wrong shape: the message does not name the tensor and both shapes"
elif grep -q '"step"' "$tmp/out"; then fail "wrong shape: a step ran"
fi

"$paralab" run "$good" --init "$tmp/absent.safetensors" --steps 1 --db "$tmp/runs.db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ]; then fail "absent: exit 0"
elif ! grep -q 'absent.safetensors: cannot open: No such file or directory' "$tmp/err"; then
    fail "absent: the message does not name the file and the cause"
fi

# A NaN in the last weight (layers.4.bias[2]).
cp "$tmp/zeros.safetensors" "$tmp/nan.safetensors"
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(-4, 2); f.write(b"\x00\x00\xc0\x7f")' "$tmp/nan.safetensors"
"$paralab" run "$good" --init "$tmp/nan.safetensors" --steps 1 --db "$tmp/runs.db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ]; then fail "NaN: exit 0"
elif ! grep -q 'nan.safetensors: tensor "layers.4.bias" holds NaN at element 2' "$tmp/err"; then
    fail "NaN: the message does not name the tensor"
fi

mkfifo "$tmp/fifo.safetensors"
timeout 120 "$paralab" run "$good" --init "$tmp/fifo.safetensors" --steps 1 --db "$tmp/runs.db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 124 ]; then fail "FIFO: --init blocked"
elif [ $rc = 0 ]; then fail "FIFO: exit 0"
elif ! grep -q 'fifo.safetensors is a FIFO, not a regular file' "$tmp/err"; then
    fail "FIFO: the message does not say what the file is"
fi

[ $failed = 0 ] && echo "init_test: all passed"
exit $((failed > 0))
