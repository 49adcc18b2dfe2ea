#!/usr/bin/env bash
# The run store from the command line (docs/experiment-format.md, "The run store"): two runs
# recorded into one new store at once both kept whole; `runs export` errors carry the system's
# reason; and, where a tmpfs can be mounted (root), a run whose store fills up fails with
# "disk full" (exit 1, its --json object, its committed rows kept and listable), and a store on
# a read-only file system is listed but refused for a run. Without root those parts are skipped.
# Usage: store_cli_test.sh PARALAB EXAMPLES_DIR
set -u
paralab=$1
examples=$2
tmp=$(mktemp -d)
mounts=()
cleanup() {
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
export XDG_DATA_HOME="$tmp/data"
good="$examples/spirals-mlp.paralab.json"
passed=0
failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
ok() { echo "ok   $*"; passed=$((passed + 1)); }

# An SQL query on a store, read-only (python's sqlite3).
sql() {
    python3 -c 'import sqlite3, sys
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
print("\n".join(str(r[0]) for r in c.execute(sys.argv[2])))' "$1" "$2"
}

# Two runs started at once on a store that does not exist yet: both finish, both are kept whole.
for round in 1 2 3; do
    db="$tmp/together$round.db"
    "$paralab" run "$good" --steps 200 --db "$db" --json >"$tmp/a.out" 2>"$tmp/a.err" &
    a=$!
    "$paralab" run "$good" --steps 200 --db "$db" --json >"$tmp/b.out" 2>"$tmp/b.err" &
    b=$!
    wait $a; rc_a=$?
    wait $b; rc_b=$?
    if [ $rc_a != 0 ] || [ $rc_b != 0 ]; then
        fail "together $round: exits $rc_a $rc_b"; cat "$tmp/a.err" "$tmp/b.err"; continue
    fi
    ids=$(sql "$db" "SELECT run_id FROM runs WHERE status = 'finished' ORDER BY run_id" | tr '\n' ' ')
    rows=$(sql "$db" "SELECT count(*) FROM records")
    if [ "$ids" = "1 2 " ] && [ "$rows" = 400 ] && ! grep -q "within a transaction\|locked" "$tmp/a.err" "$tmp/b.err"; then
        ok "together $round"
    else
        fail "together $round: finished runs '$ids', $rows step rows"; cat "$tmp/a.err" "$tmp/b.err"
    fi
done

# runs export: the reason the file cannot be written.
db="$tmp/together1.db"
touch "$tmp/plain"
"$paralab" runs export 1 --csv "$tmp/plain/run.csv" --db "$db" 2>"$tmp/err"
rc=$?
if [ $rc = 2 ] && grep -q "cannot write the CSV file: Not a directory" "$tmp/err"; then ok export_errno
else fail "export_errno: exit $rc"; cat "$tmp/err"; fi

# Rows another program wrote: a run whose devices are valid JSON but no list, one whose config
# nests 300,000 arrays. Each is left out of `runs list` with its id and cause, never hiding the
# others; `runs show` of a good run works, of a bad one says why (no crash); a name's terminal
# control characters are printed escaped.
db="$tmp/together2.db"
python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE runs SET devices = ? WHERE run_id = 1", ("{\"cpu:0\": 1}",))
c.execute("UPDATE runs SET config = ?, name = ? WHERE run_id = 2", ("[" * 300000, "x\x1b[2Jy"))
c.commit()' "$db"
"$paralab" runs list --db "$db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ] && grep -q "run 1 left out: its row in .* does not read (devices: expected a list of device names" "$tmp/err" &&
    grep -q "run 2 left out: .*config: nested deeper than 512 levels" "$tmp/err"; then ok bad_rows_list
else fail "bad_rows_list: exit $rc"; cat "$tmp/out" "$tmp/err"; fi
"$paralab" runs show 2 --db "$db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 2 ] && grep -q "run 2 cannot be read: config: nested deeper than 512 levels" "$tmp/err"; then ok bad_rows_show
else fail "bad_rows_show: exit $rc"; cat "$tmp/err"; fi
python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE runs SET config = (SELECT config FROM runs WHERE run_id = 1) WHERE run_id = 2")
c.commit()' "$db"
"$paralab" runs show 2 --db "$db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ] && grep -qF 'run 2: x\x1B[2Jy' "$tmp/out" && ! grep -q $'\x1b' "$tmp/out"; then ok names_escaped
else fail "names_escaped: exit $rc"; cat -v "$tmp/out" "$tmp/err"; fi

# A run that another process resumes (its row running, that process alive) is not resumed twice.
python3 -c 'import os, socket, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE runs SET status = ?, pid = ?, host = ? WHERE run_id = 2", ("running", int(sys.argv[2]), socket.gethostname()))
c.commit()' "$db" $$
"$paralab" run --resume 2 --db "$db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 2 ] && grep -q "run 2 is running" "$tmp/err" && [ "$(sql "$db" "SELECT status FROM runs WHERE run_id = 2")" = running ]; then
    ok resume_exclusive
else fail "resume_exclusive: exit $rc"; cat "$tmp/err"; fi

mkdir -p "$tmp/full" "$tmp/ro"
if ! mount -t tmpfs -o size=400k tmpfs "$tmp/full" 2>/dev/null; then
    echo "skip full disk and read-only file system: cannot mount a tmpfs here (needs root)"
    echo "$passed passed, $failed failed"
    [ $failed = 0 ]
    exit
fi
mounts+=("$tmp/full")

# A run whose store fills up: failed, "disk full", exit 1 with its --json object; the rows it
# committed stay, the store is whole, and listing, showing and exporting it still work.
"$paralab" run "$good" --steps 20000 --db "$tmp/full/runs.db" --json >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 1 ] && grep -q '"status":"failed"' "$tmp/out" && grep -q '"error":"disk full: ' "$tmp/out"; then
    ok full_disk_run
else
    fail "full_disk_run: exit $rc"; cat "$tmp/out" "$tmp/err"
fi
status=$(sql "$tmp/full/runs.db" "SELECT status FROM runs WHERE run_id = 1")
rows=$(sql "$tmp/full/runs.db" "SELECT count(*) FROM records WHERE run_id = 1")
check=$(sql "$tmp/full/runs.db" "PRAGMA integrity_check")
# Its end is recorded as failed; when not even that fitted, its row says running until the
# process is gone, and then it is reported interrupted (below).
if { [ "$status" = failed ] || [ "$status" = running ]; } && [ "$rows" -gt 0 ] && [ "$check" = ok ]; then ok full_disk_store
else fail "full_disk_store: status '$status', $rows rows, integrity '$check'"; fi
if "$paralab" runs list --db "$tmp/full/runs.db" --json >"$tmp/out" 2>"$tmp/err" &&
    grep -qE '"status": "(failed|interrupted)"' "$tmp/out" &&
    "$paralab" runs show 1 --db "$tmp/full/runs.db" >/dev/null 2>>"$tmp/err" &&
    "$paralab" runs export 1 --db "$tmp/full/runs.db" --csv "$tmp/full.csv" 2>>"$tmp/err" &&
    [ "$(($(wc -l <"$tmp/full.csv") - 1))" = "$rows" ]; then
    ok full_disk_listed
else
    fail full_disk_listed; cat "$tmp/out" "$tmp/err"
fi

# A store on a read-only file system: listed as it is; a run is refused before it starts.
mount -t tmpfs -o size=4m tmpfs "$tmp/ro" && mounts+=("$tmp/ro")
"$paralab" run "$good" --steps 5 --db "$tmp/ro/runs.db" >/dev/null 2>&1
mount -o remount,ro "$tmp/ro"
if "$paralab" runs list --db "$tmp/ro/runs.db" --json 2>"$tmp/err" | grep -q '"status": "finished"'; then
    ok readonly_fs_list
else
    fail readonly_fs_list; cat "$tmp/err"
fi
"$paralab" run "$good" --steps 5 --db "$tmp/ro/runs.db" --json >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 2 ] && grep -q "cannot record a run here: the folder .* is not writable (Read-only file system)" "$tmp/err"; then
    ok readonly_fs_run
else
    fail "readonly_fs_run: exit $rc"; cat "$tmp/err"
fi
"$paralab" runs list --db "$tmp/ro/typo/sub/x.db" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ] && grep -q "no run store at" "$tmp/err" && [ ! -e "$tmp/ro/typo" ]; then ok readonly_fs_missing
else fail "readonly_fs_missing: exit $rc"; cat "$tmp/err"; fi

echo "$passed passed, $failed failed"
[ $failed = 0 ]
