#!/usr/bin/env bash
# hoist under Slurm: starts a one-node Slurm of its own on this machine (slurmctld and slurmd from
# Debian's slurm-wlm 22.05, auth/none, its own ports, state and logs in a scratch folder; the
# system's Slurm, if any, is not touched) with the node declaring this machine's CPUs (at least 2),
# then `srun --mpi=pmix -n N hoist load ...` (Slurm's PMIx v4 plugin with Debian's Open MPI 4.1,
# which is built against the same libpmix2): qwen3-moe-tiny at tp 2 (N 2) and at tp 2 x ep 4 with
# --dedup job (N 4, --overcommit where the node has fewer CPUs). Asserted, as under mpirun: exit 0,
# every rank's dump equal to a single-process load byte for byte, the report's ranks on this host
# with the bytes of the plain plan's independent count (check_report.py), and a Slurm task's rank
# is the plan's. Then docs/slurm/hoist-load.sbatch itself, in a `salloc` of two tasks: its topology
# (written from SLURM_JOB_NODELIST) matches the ranks' host, and its dumps and report are the same.
# Exit 77 (skipped) with the reason where Slurm is not installed (tools/deps.sh installs it) or
# does not come up. Every daemon is stopped and every file removed on exit (trap).
# MKCKPT, BED_DIR: read by the sourced lib.sh.
# shellcheck disable=SC2034
set -euo pipefail
HOIST="$(readlink -f "$1")" MKCKPT="$(readlink -f "$2")"
here="$(cd "$(dirname "$0")" && pwd)"
HOIST_SRC="$(cd "$here/../.." && pwd)"
source "$HOIST_SRC/tools/env.sh"
source "$here/lib.sh"

skip() { echo "SKIPPED: $*"; exit 77; }
for tool in slurmctld slurmd srun sinfo; do
  command -v "$tool" >/dev/null ||
    skip "$tool not found (tools/deps.sh installs slurmctld, slurmd and slurm-client)"
done
[[ $(id -u) == 0 ]] || skip "not root (slurmd runs jobs as any user only as root)"
[[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so ]] ||
  skip "Slurm's PMIx plugin (mpi_pmix.so) is missing"

WORK="$(mktemp -d /tmp/hoist-slurm.XXXXXX)"
BED_DIR="$here"
pids=()
cleanup() {
  local rc=$? pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
  echo "slurm: daemons ${pids[*]:-none} stopped, $WORK removed" >&2
  return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Writes $WORK/slurm.conf: one node (this host, its CPUs), two free ports, everything local.
write_conf() {
  local host cpus port
  host="$(hostname -s)" cpus="$(nproc)"
  ((cpus >= 2)) || cpus=2
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')"
  mkdir -p "$WORK/state" "$WORK/spool"
  cat >"$WORK/slurm.conf" <<EOC
ClusterName=hoist-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=hoist Nodes=$host Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:4
EOC
}

start_slurm() {
  export SLURM_CONF="$WORK/slurm.conf"
  slurmctld -D -i -f "$SLURM_CONF" >"$WORK/slurmctld.out" 2>&1 &
  pids+=($!)
  slurmd -D -f "$SLURM_CONF" -N "$(hostname -s)" >"$WORK/slurmd.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 150); do
    if [[ $(sinfo -h -o %t 2>/dev/null) =~ ^(idle|mix) ]]; then
      echo "  slurm up: $(sinfo -h -o '%P %D node(s) %c CPUs %t')"
      return 0
    fi
    sleep 0.2
  done
  echo "slurmctld:"; tail -n 20 "$WORK/slurmctld.log" "$WORK/slurmctld.out" 2>/dev/null || true
  echo "slurmd:"; tail -n 20 "$WORK/slurmd.log" "$WORK/slurmd.out" 2>/dev/null || true
  skip "this machine's Slurm did not come up within 30 s (logs above)"
}

# srun one load and check it: slurm_load N DEDUP FLAGS...
slurm_load() {
  local n="$1" mode="$2" out="$WORK/srun-$1-$2"
  shift 2
  echo "== srun --mpi=pmix -n $n hoist load $* --dedup $mode"
  timeout -k 5 120 srun --mpi=pmix -n "$n" --overcommit -t 2 "$HOIST" load --model "$model" \
    "$@" --device host --dedup "$mode" --no-progress --log-level warn --report-json "$out.json" \
    --dump "$out" >"$out.log" 2>&1 || { echo "FAIL: srun exited $?:"; cat "$out.log"; exit 1; }
  hosts_reference "$out-ref" "$n" --model "$model" "$@"
  hosts_same_dumps "$out-ref" "$out" "$n"
  hosts_counts "$out-counts.json" "$(seq -s, 0 $((n - 1)))" -- --model "$model" "$@"
  python3 "$here/check_report.py" "$out.json" "$out-counts.json" "$mode" "$(hostname)"
}

write_conf
start_slurm
hosts_fixture qwen3-moe qwen3-moe-tiny
model="$WORK/qwen3-moe-tiny"
slurm_load 2 none --tp 2
slurm_load 4 job --tp 2 --ep 4

echo "== docs/slurm/hoist-load.sbatch in an allocation of one node, two tasks (TP 2)"
(cd "$WORK" && PATH="$(dirname "$HOIST"):$PATH" MODEL="$model" TP=2 timeout -k 5 120 \
  salloc -N 1 --ntasks-per-node=2 --overcommit -t 2 bash "$HOIST_SRC/docs/slurm/hoist-load.sbatch" \
  --device host --no-progress --log-level warn --dump "$WORK/sbatch" \
  --report-json "$WORK/sbatch.json" >"$WORK/sbatch.log" 2>&1) ||
  { echo "FAIL: the sbatch script failed:"; cat "$WORK/sbatch.log"; exit 1; }
hosts_same_dumps "$WORK/srun-2-none-ref" "$WORK/sbatch" 2
python3 "$here/check_report.py" "$WORK/sbatch.json" "$WORK/srun-2-none-counts.json" none \
  "$(hostname)"
echo "PASS: srun runs hoist's ranks as mpirun does"
