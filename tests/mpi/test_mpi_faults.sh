#!/bin/sh
# Faults of a run across processes, on the real CLI under mpirun (CTest label `mpi`):
#   1. a stop (SIGINT to mpirun, as the window's Stop does) ends every rank and the run is
#      `stopped`, with its steps stored;
#   2. a rank killed mid-run (SIGKILL): mpirun ends the job, and the run is `failed` with a
#      message naming the rank, its steps kept;
#   3. a rank that hangs (SIGSTOP): rank 0's watchdog fails the run after --rank-timeout, naming
#      the rank, and every process exits;
#   3b. rank 0 itself hangs (SIGSTOP): the other ranks, which watch its heartbeat, end the job
#      after --rank-timeout saying so, and the run is `failed` or `interrupted`;
#   4. a loss that becomes NaN: the run is `failed` with the cause, and the job ends.
# Each job must end within a bound (timeout), and the store must stay readable. And one run
# without a fault that no other test makes on the CLI:
#   5. tensor_parallel on the char-GPT example (gpt-char.paralab.json, beside EXPERIMENT), one
#      device per process: it finishes, and rank 0 stores it with the world's devices;
#   6. zero stage 3 (EXPERIMENT with its strategy {"type": "zero", "stage": 3}), one device per
#      process: the same.
# Usage: test_mpi_faults.sh PARALAB EXPERIMENT RUN_MPI_TEST MPIEXEC NUMPROC_FLAG
set -u
paralab=$1 experiment=$2 run_mpi=$3 mpiexec=$4 np_flag=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
say() { echo "test_mpi_faults: $*"; }
check() {  # check DESCRIPTION COMMAND...
    what=$1
    shift
    if "$@"; then say "ok: $what"; else say "FAILED: $what"; fail=1; fi
}

# The pid of rank $2 of the job writing to store $1.
rank_pid() {
    for pid in $(pgrep -f "paralab run .*$1"); do
        if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$pid"
            return 0
        fi
    done
    return 1
}

# Rows of per-step records stored for run 1 of store $1 (0 while there is none).
stored_steps() {
    if "$paralab" runs export 1 --db "$1" --csv "$dir/steps.csv" >/dev/null 2>&1; then
        tail -n +2 "$dir/steps.csv" | wc -l
    else
        echo 0
    fi
}

# Waits until the run in store $1 has stored some steps (at most 40 s).
wait_for_steps() {
    i=0
    while [ $i -lt 400 ]; do
        [ "$(stored_steps "$1")" -gt 6 ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# Starts a long 3-rank ddp job on store $1 in the background; its exit code goes to $1.rc.
start_job() {
    (
        timeout 60 "$run_mpi" "$mpiexec" "$np_flag" 3 "$paralab" run "$experiment" --devices cpu:0 --strategy ddp \
            --epochs 100000 --steps 10000000 --db "$1" --rank-timeout "$2" > "$1.out" 2> "$1.err"
        echo $? > "$1.rc"
    ) &
}

status_of() { "$paralab" runs show 1 --db "$1" --json | grep -o '"status": *"[a-z]*"' | grep -o '[a-z]*"$' | tr -d '"'; }
error_of() { "$paralab" runs show 1 --db "$1" --json | grep -o '"error": *"[^"]*"'; }

# fault_case NAME RANK-TIMEOUT ACTION STATUS ERROR-PATTERN: a 3-rank job on its own store,
# ACTION (a command, given the store) once steps are stored; then the job must end within its
# bound, the run have STATUS and keep its steps, and its error match ERROR-PATTERN (if any).
fault_case() {
    name=$1 timeout_s=$2 action=$3 status=$4 pattern=$5
    db=$dir/$name.db
    start_job "$db" "$timeout_s"
    check "$name: steps were stored before the fault" wait_for_steps "$db"
    $action "$db"
    wait
    check "$name: the job ended within its bound (rc $(cat "$db.rc"))" test "$(cat "$db.rc")" != 124
    check "$name: the run is $status (got $(status_of "$db"))" test "$(status_of "$db")" = "$status"
    check "$name: the run keeps its steps" test "$(stored_steps "$db")" -gt 0
    if [ -n "$pattern" ]; then
        check "$name: its error says '$pattern': $(error_of "$db")" \
            sh -c "'$paralab' runs show 1 --db '$db' --json | grep -q '$pattern'"
    fi
    check "$name: no process of the job is left" sh -c "! pgrep -f '[p]aralab run .*$db' >/dev/null"
}

stop_job() { pkill -INT -f "^[^ ]*mpi(run|exec)[^ ]* .*$1"; }  # mpirun only, not the timeout around it
kill_rank1() { pid=$(rank_pid "$1" 1) && kill -KILL "$pid"; }
hang_rank2() { pid=$(rank_pid "$1" 2) && kill -STOP "$pid"; }

fault_case stop 60 stop_job stopped ""
fault_case kill 60 kill_rank1 failed "rank 1 (r1/cpu:0)"
# 5 s: ranks 0 and 1 spin in the collective the stopped rank 2 never joins, and on a loaded
# 2-core machine rank 1's heartbeat thread was once held back 2 s, long enough to be named.
fault_case hang 5 hang_rank2 failed "rank 2 (r2/cpu:0).*not heard from"
# Rank 0 itself hangs (SIGSTOP): the other ranks hear its heartbeat no more and end the job
# after --rank-timeout, saying why. Rank 0 either records the run as failed when mpirun wakes
# it to end it, or is killed first: then its run reads as interrupted once its process is gone.
db=$dir/hang_root.db
start_job "$db" 5
check "hang_root: steps were stored before the fault" wait_for_steps "$db"
pid=$(rank_pid "$db" 0) && kill -STOP "$pid"
wait
check "hang_root: the job ended within its bound (rc $(cat "$db.rc"))" test "$(cat "$db.rc")" != 124
check "hang_root: a rank said that rank 0 was not heard from" grep -q "rank 0 (r0/cpu:0) not heard from for" "$db.err"
ended_status() {  # failed or interrupted, once rank 0's process is gone (at most 10 s)
    i=0
    while [ $i -lt 100 ]; do
        case "$(status_of "$1")" in failed|interrupted) return 0 ;; esac
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
check "hang_root: the run is failed or interrupted (got $(status_of "$db"))" ended_status "$db"
check "hang_root: the run keeps its steps" test "$(stored_steps "$db")" -gt 0
check "hang_root: no process of the job is left" sh -c "! pgrep -f '[p]aralab run .*$db' >/dev/null"

# 4. A NaN loss (a learning rate of 1e37).
db=$dir/nan.db
sed 's/"lr": *[0-9.e+-]*/"lr": 1e37/' "$experiment" > "$dir/nan.paralab.json"
timeout 60 "$run_mpi" "$mpiexec" "$np_flag" 2 "$paralab" run "$dir/nan.paralab.json" --devices cpu:0 \
    --strategy ddp --db "$db" > "$db.out" 2> "$db.err"
echo $? > "$db.rc"
check "the job whose loss became NaN ended within its bound, unsuccessfully (rc $(cat "$db.rc"))" \
    sh -c "[ $(cat "$db.rc") != 124 ] && [ $(cat "$db.rc") != 0 ]"
check "the run whose loss became NaN is failed (got $(status_of "$db"))" test "$(status_of "$db")" = failed
check "its error names the rank and the NaN: $(error_of "$db")" \
    sh -c "'$paralab' runs show 1 --db '$db' --json | grep -q 'rank [01] (r[01]/cpu:0): the training loss became NaN'"

# 5. tensor_parallel across 2 processes.
db=$dir/tp.db
timeout 120 "$run_mpi" "$mpiexec" "$np_flag" 2 "$paralab" run "$(dirname "$experiment")/gpt-char.paralab.json" \
    --devices cpu:0 --strategy tensor_parallel --steps 20 --db "$db" --json > "$db.out" 2> "$db.err"
echo $? > "$db.rc"
check "the tensor_parallel job ended successfully (rc $(cat "$db.rc"))" test "$(cat "$db.rc")" = 0
check "the tensor_parallel run is finished (got $(status_of "$db"))" test "$(status_of "$db")" = finished
check "it is stored with devices r0/cpu:0, r1/cpu:0 and 20 steps" \
    sh -c "'$paralab' runs show 1 --db '$db' --json | tr -d ' \n' | grep -q '\"devices\":\[\"r0/cpu:0\",\"r1/cpu:0\"\]' &&
           '$paralab' runs show 1 --db '$db' --json | tr -d ' \n' | grep -q '\"steps\":20,'"

# 6. zero stage 3 across 2 processes. The file sets the stage: --strategy would reset the
# strategy to its defaults (stage 1).
db=$dir/zero3.db
sed 's/"strategy": *{[^}]*}/"strategy": {"type": "zero", "stage": 3}/' "$experiment" > "$dir/zero3.paralab.json"
timeout 120 "$run_mpi" "$mpiexec" "$np_flag" 2 "$paralab" run "$dir/zero3.paralab.json" \
    --devices cpu:0 --steps 20 --db "$db" --json > "$db.out" 2> "$db.err"
echo $? > "$db.rc"
check "the zero stage 3 job ended successfully (rc $(cat "$db.rc"))" test "$(cat "$db.rc")" = 0
check "the zero stage 3 run is finished (got $(status_of "$db"))" test "$(status_of "$db")" = finished
check "it is stored as zero stage 3 with devices r0/cpu:0, r1/cpu:0 and 20 steps" \
    sh -c "'$paralab' runs show 1 --db '$db' --json | tr -d ' \n' | grep -q '\"stage\":3,' &&
           '$paralab' runs show 1 --db '$db' --json | tr -d ' \n' | grep -q '\"type\":\"zero\"' &&
           '$paralab' runs show 1 --db '$db' --json | tr -d ' \n' | grep -q '\"devices\":\[\"r0/cpu:0\",\"r1/cpu:0\"\]' &&
           '$paralab' runs show 1 --db '$db' --json | tr -d ' \n' | grep -q '\"steps\":20,'"

if [ $fail -ne 0 ]; then
    for f in "$dir"/*.err; do echo "--- $f"; tail -n 15 "$f"; done
    echo "0 passed, 1 failed"
    exit 1
fi
echo "1 passed, 0 failed"
