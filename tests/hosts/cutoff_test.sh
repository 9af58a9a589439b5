#!/usr/bin/env bash
# A host cut off mid-load, on the two-host namespace bed (tests/hosts/bed.sh): qwen3-moe-tiny at
# tp 2 x ep 4, `--dedup job` (so the hosts forward bytes to each other), `--peer-timeout-s 5`,
# the veths shaped to 512 kbit/s so that the exchange lasts seconds. Once host a has sent
# 100 KB (the plans are about 20 KB; the exchange about 270 KB), host b is cut off:
#   cutoff_test.sh HOIST MKCKPT link   `ip link set ... down` on b's veth
#   cutoff_test.sh HOIST MKCKPT stop   b's ranks SIGSTOPped
# Asserted: the job fails (exit 1, not mpirun's time limit) with one hoist error line naming
# host b and one of its ranks (2 or 3) as the rank that went silent; afterwards no process is
# left in either host's namespace (hoist ranks, Open MPI's daemons).
#
# A host whose link is down cannot be told to end: Open MPI's mpirun waits for its daemon there
# until TCP gives up sending to it (net.ipv4.tcp_retries2, about 15 minutes by default), and the
# daemon waits as long for mpirun. The bed lowers tcp_retries2 to 5 in its namespaces (about 13 s
# here) and the daemons' keepalive (oob_tcp_keepalive_*) so that happens within the test; hoist's
# own part (rank 0 naming the silent rank, every rank exiting) is bounded by --peer-timeout-s.
# Exit 77 (skipped) with the reason where the machine refuses namespaces.
# MKCKPT, BED_WORK: read by the sourced bed.sh and lib.sh.
# shellcheck disable=SC2034
set -euo pipefail
HOIST="$(readlink -f "$1")" MKCKPT="$(readlink -f "$2")" HOW="$3"
here="$(cd "$(dirname "$0")" && pwd)"
HOIST_SRC="$(cd "$here/../.." && pwd)"
source "$HOIST_SRC/tools/env.sh"
source "$here/bed.sh"
source "$here/lib.sh"
hosts_require_bed
hosts_require_shaping

WORK="$(mktemp -d /tmp/hoist-hosts.XXXXXX)" BED_WORK="$WORK"
bed_up 2
bed_mpi_env
export OMPI_MCA_oob_tcp_keepalive_time=10 OMPI_MCA_oob_tcp_keepalive_intvl=2
export OMPI_MCA_oob_tcp_keepalive_probes=3
for h in a b; do
  ip netns exec "$(bed_host "$h")" sysctl -qw net.ipv4.tcp_retries2=5
  bed_shape "$h" 512kbit 32kbit 400ms
done
hosts_fixture qwen3-moe qwen3-moe-tiny
hosts_topology "$WORK/topo.yaml" 2 tp=2 ep=4 -- "$(bed_host a)" "$(bed_host b)"
bed_hostfile "$WORK/hostfile" 2 a b

# Bytes host a has sent over its veth (sysfs as `ip netns exec` mounts it: milliseconds, where a
# python3 parse of `ip -j` took seconds on a loaded machine and the cut came after the load).
tx_bytes() {
  ip netns exec "$(bed_host a)" cat "/sys/class/net/$(bed_if a)/statistics/tx_bytes"
}

# Cuts host b off: its link down, or its hoist processes stopped.
cut_off() {
  if [[ $HOW == link ]]; then
    ip -n "$(bed_host b)" link set "$(bed_if b)" down
    return
  fi
  local pid stopped=()
  for pid in $(ip netns pids "$(bed_host b)"); do
    if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == hoist ]]; then
      kill -STOP "$pid" && stopped+=("$pid")
    fi
  done
  ((${#stopped[@]} == 2)) || { echo "FAIL: stopped ${#stopped[*]} ranks on b, not 2"; exit 1; }
  echo "  stopped b's ranks: ${stopped[*]}"
}

BED_TIMEOUT=150 bed_mpirun --hostfile "$WORK/hostfile" -np 4 "$HOIST" load \
  --topology "$WORK/topo.yaml" --model "$WORK/qwen3-moe-tiny" --device host --dedup job \
  --peer-timeout-s 5 --no-progress --log-level warn >"$WORK/out" 2>&1 &
job=$!
start=$SECONDS
until (($(tx_bytes) > 100000)); do
  if ! kill -0 "$job" 2>/dev/null; then
    echo "FAIL: the job ended before the cut:"
    cat "$WORK/out"
    exit 1
  fi
  sleep 0.05
done
echo "== cutting host b off ($HOW) after $((SECONDS - start)) s, $(tx_bytes) B sent by a"
cut_off
rc=0
wait "$job" || rc=$?
echo "  mpirun exited $rc after $((SECONDS - start)) s"
out="$(cat "$WORK/out")"
if [[ $rc != 1 ]]; then
  echo "FAIL: exit $rc, not 1 (124: mpirun hung to the limit):"
  echo "$out"
  exit 1
fi
first="$(grep -m1 "^hoist: error:" <<<"$out" || true)"
echo "  $first"
if ! grep -Eq "rank [23] on $(bed_host b) sent nothing for 5.0 s" <<<"$first"; then
  echo "FAIL: the first error does not name host b's rank 2 or 3 as silent:"
  echo "$out"
  exit 1
fi
for ((i = 0; i < 80; i++)); do
  left="$(bed_pids | tr '\n' ' ')"
  [[ -z ${left// /} ]] && break
  sleep 0.5
done
if [[ -n ${left// /} ]]; then
  echo "FAIL: processes left on the hosts: $(ps -o pid=,comm= -p "${left// /,}" | tr '\n' ' ')"
  exit 1
fi
echo "  no process left on either host $((SECONDS - start)) s after the start"
echo "PASS: host b cut off ($HOW): named, job ended, no process left"
