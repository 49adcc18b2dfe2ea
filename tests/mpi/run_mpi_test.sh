#!/bin/sh
# Runs a program as N ranks of Open MPI on this host, for CTest (label `mpi`).
# Usage: run_mpi_test.sh MPIEXEC NUMPROC_FLAG N PROGRAM [ARGS...]
#
# The flags a test machine needs are decided here, at test time, not in the user's
# environment: --oversubscribe (more ranks than cores is normal in a test), and
# --allow-run-as-root only when running as root (CI containers do; Open MPI refuses otherwise).
# Transports: shared memory only (btl self,vader), with vader's single-copy mechanism (CMA,
# process_vm_readv) off, because container seccomp profiles often forbid it and a run then
# fails; waiting ranks yield their core, because ranks share a few cores with each other and
# with the threads of the local backend. Any OMPI_MCA_* already set by the caller wins.
set -eu
if [ $# -lt 4 ]; then
    echo "usage: $0 MPIEXEC NUMPROC_FLAG N PROGRAM [ARGS...]" >&2
    exit 2
fi
mpiexec=$1 numproc_flag=$2 ranks=$3
shift 3

: "${OMPI_MCA_btl:=self,vader}"
: "${OMPI_MCA_btl_vader_single_copy_mechanism:=none}"
: "${OMPI_MCA_mpi_yield_when_idle:=1}"
export OMPI_MCA_btl OMPI_MCA_btl_vader_single_copy_mechanism OMPI_MCA_mpi_yield_when_idle

as_root=""
if [ "$(id -u)" = 0 ]; then
    as_root="--allow-run-as-root"
fi

# shellcheck disable=SC2086  # as_root is empty or one word
exec "$mpiexec" "$numproc_flag" "$ranks" --oversubscribe $as_root "$@"
