# Sourced by the cross-host tests (tests/hosts/*_test.sh): a test bed of N "hosts" on this
# machine. Each host is a network namespace named `hoist-<pid>-<letter>` (also its hostname: every
# process started there runs in a fresh UTS namespace that says so), with one interface on the
# bed's network 10.231.0.0/24 (host a .1, b .2, c .3): two hosts are joined by one veth pair,
# three or more by veth pairs to a bridge inside a switch namespace `hoist-<pid>-sw`, so nothing of
# the bed touches this machine's own network. /etc/netns/<ns>/hosts (which `ip netns exec` binds
# over /etc/hosts there) names every host. The filesystem is shared, as a checkpoint folder on a
# cluster's shared storage is.
#
# mpirun runs on host a; Open MPI reaches the other hosts through tests/hosts/rsh_agent.sh (its
# plm_rsh_agent), and both its out-of-band and its MPI transports are bound to the bed's network
# (oob_tcp_if_include, btl tcp + btl_tcp_if_include).
#
# Cleanup: bed_down (installed as an EXIT trap by bed_up) kills every process left in the bed's
# namespaces, deletes the namespaces (their veths and the bridge go with them), the /etc/netns
# entries and the scratch folder BED_WORK (when set). Needs root and `ip netns`; bed_can_run says
# why not where refused.
# shellcheck shell=bash

BED_NET=10.231.0
BED_HOSTS=()
BED_ID=""
BED_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

bed_log() { echo "hosts-bed: $*" >&2; }

# Prints why this machine cannot run the bed (and returns 1), or returns 0.
bed_can_run() {
  if [[ $(id -u) != 0 ]]; then
    echo "not root (namespaces and veths need CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    return 1
  fi
  local tool
  for tool in ip unshare tc mpirun; do
    command -v "$tool" >/dev/null || { echo "$tool not found"; return 1; }
  done
  local probe="hoist-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "this machine refuses network namespaces (ip netns add failed)"
    return 1
  fi
  local ok=1 why=""
  if ! ip netns exec "$probe" unshare --uts -- hostname "$probe" 2>/dev/null; then
    ok=0 why="this machine refuses UTS namespaces (unshare --uts failed)"
  elif ! ip -n "$probe" link add hoistprobe0 type veth peer name hoistprobe1 2>/dev/null; then
    ok=0 why="this machine refuses veth pairs"
  fi
  ip netns delete "$probe" 2>/dev/null || true
  [[ $ok == 1 ]] || { echo "$why"; return 1; }
}

# Removes the namespaces and /etc/netns entries of beds whose test process is gone (one killed
# with SIGKILL, e.g. by ctest's time limit, runs no trap).
bed_sweep() {
  local ns pid
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^hoist-[0-9]+-([a-f]|sw)$' || true); do
    pid="${ns#hoist-}" pid="${pid%-*}"
    if ! kill -0 "$pid" 2>/dev/null; then
      bed_log "removing $ns, left by test process $pid (gone)"
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
      ip netns delete "$ns" 2>/dev/null || true
      rm -rf "/etc/netns/$ns"
    fi
  done
}

# Prints why the bed's links cannot be shaped with tc's tbf (and returns 1), or returns 0.
bed_can_shape() {
  local probe="hoist-probe-$$" ok=0
  ip netns add "$probe" 2>/dev/null || { echo "ip netns add failed"; return 1; }
  if ip -n "$probe" link add hoistprobe0 type veth peer name hoistprobe1 2>/dev/null &&
    ip netns exec "$probe" tc qdisc add dev hoistprobe0 root tbf rate 1gbit burst 32kbit \
      latency 50ms 2>/dev/null; then
    ok=1
  fi
  ip netns delete "$probe" 2>/dev/null || true
  if [[ $ok != 1 ]]; then
    echo "tc cannot shape a veth here (the tbf qdisc was refused: no sch_tbf module?)"
    return 1
  fi
}

bed_host() { echo "hoist-$BED_ID-$1"; }
bed_addr() { echo "$BED_NET.$(($(printf '%d' "'$1") - 96))"; }  # a -> .1, b -> .2, ...
bed_if() { echo "hv$BED_ID$1"; }                                   # a host's interface
# Shapes host $1's link with a token bucket (tc tbf): rate $2, burst $3, latency $4.
bed_shape() {
  ip netns exec "$(bed_host "$1")" tc qdisc add dev "$(bed_if "$1")" root tbf rate "$2" \
    burst "$3" latency "$4"
}

# Brings up `n` hosts (2 or more) and installs the cleanup trap.
bed_up() {
  local n="$1" letters=(a b c d e f)
  bed_sweep
  BED_ID="$$"  # the test's pid: unique among running tests, and how bed_sweep finds dead ones
  trap bed_down EXIT
  trap 'exit 130' INT TERM
  BED_HOSTS=()
  local i h
  for ((i = 0; i < n; i++)); do
    h="${letters[$i]}"
    BED_HOSTS+=("$h")
    ip netns add "$(bed_host "$h")"
    ip -n "$(bed_host "$h")" link set lo up
  done
  if ((n == 2)); then
    ip link add "$(bed_if a)" netns "$(bed_host a)" type veth peer name "$(bed_if b)" \
      netns "$(bed_host b)"
  else
    local sw="hoist-$BED_ID-sw"
    ip netns add "$sw"
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    for h in "${BED_HOSTS[@]}"; do
      ip link add "$(bed_if "$h")" netns "$(bed_host "$h")" type veth peer name "p$h" netns "$sw"
      ip -n "$sw" link set "p$h" master br0 up
    done
  fi
  for h in "${BED_HOSTS[@]}"; do
    ip -n "$(bed_host "$h")" addr add "$(bed_addr "$h")/24" dev "$(bed_if "$h")"
    ip -n "$(bed_host "$h")" link set "$(bed_if "$h")" up
    mkdir -p "/etc/netns/$(bed_host "$h")"
  done
  for h in "${BED_HOSTS[@]}"; do
    local g
    { echo "127.0.0.1 localhost $(bed_host "$h")"
      for g in "${BED_HOSTS[@]}"; do echo "$(bed_addr "$g") $(bed_host "$g")"; done
    } >"/etc/netns/$(bed_host "$h")/hosts"
  done
  bed_log "up: ${n} hosts $(bed_host a) .. $(bed_host "${BED_HOSTS[-1]}") on $BED_NET.0/24"
}

# Every process in the bed's namespaces (pids, one a line).
bed_pids() {
  local h
  for h in "${BED_HOSTS[@]}"; do ip netns pids "$(bed_host "$h")" 2>/dev/null || true; done
}

bed_down() {
  local rc=$?
  [[ -n $BED_ID ]] || return "$rc"
  local pids
  pids="$(bed_pids | tr '\n' ' ')"
  if [[ -n ${pids// /} ]]; then
    bed_log "killing processes left in the bed: $pids"
    # shellcheck disable=SC2086
    kill -CONT $pids 2>/dev/null || true
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
  fi
  local h
  for h in "${BED_HOSTS[@]}"; do
    ip netns delete "$(bed_host "$h")" 2>/dev/null || true
    rm -rf "/etc/netns/$(bed_host "$h")"
  done
  ip netns delete "hoist-$BED_ID-sw" 2>/dev/null || true
  rmdir /etc/netns 2>/dev/null || true
  if [[ -n ${BED_WORK:-} ]]; then rm -rf "$BED_WORK"; fi
  bed_log "down: namespaces, links and /etc/netns entries of bed $BED_ID removed"
  BED_ID=""
  return "$rc"
}

# Runs a command on host `h` (its namespace and hostname).
bed_exec() {
  local h="$1"
  shift
  ip netns exec "$(bed_host "$h")" unshare --uts -- \
    /bin/sh -c 'hostname "$1" && shift && exec "$@"' sh "$(bed_host "$h")" "$@"
}

# The Open MPI settings of a run across the bed, as environment (overrides tools/env.sh's
# single-host ones).
bed_mpi_env() {
  export OMPI_MCA_plm_rsh_agent="$BED_DIR/rsh_agent.sh"
  export OMPI_MCA_btl=self,vader,tcp
  export OMPI_MCA_btl_tcp_if_include="$BED_NET.0/24"
  export OMPI_MCA_oob_tcp_if_include="$BED_NET.0/24"
  export OMPI_MCA_plm_rsh_no_tree_spawn=1
}

# Writes a hostfile: `slots` ranks on each host given (letters), in order.
bed_hostfile() {
  local file="$1" slots="$2" h
  shift 2
  : >"$file"
  for h in "$@"; do echo "$(bed_host "$h") slots=$slots" >>"$file"; done
}

# mpirun on host a over the bed, bounded by BED_TIMEOUT seconds (default 120; then SIGTERM, and
# SIGKILL 10 s later): bed_mpirun ARGS... (after `bed_mpi_env`).
bed_mpirun() { bed_exec a timeout -k 10 "${BED_TIMEOUT:-120}" mpirun "$@"; }
