#!/usr/bin/env bash
# Cross-host loads on the namespace test bed (tests/hosts/bed.sh), `--device host` ranks under
# mpirun over TCP between the hosts:
#   dedup_test.sh HOIST MKCKPT 2   two hosts of two ranks, qwen3-moe-tiny at tp 2 x ep 4
#   dedup_test.sh HOIST MKCKPT 3   three hosts of two ranks, qwen3-tiny at tp 2 x dp 3
# For each, with a topology naming the real hosts: `--dedup job` (each byte read once per job,
# the rest forwarded between hosts) and `--dedup node` (once per host): every rank's dump equals
# a single-process load of that rank byte for byte, and the report's per-rank hosts and bytes
# match the plain plan's independent count (check_report.py). Then the same topology with its
# nodes in the wrong order is refused, exit 2, naming the rank and both placements.
# Exit 77 (skipped) with the reason where the machine refuses namespaces.
# MKCKPT, BED_WORK, BED_DIR: read by the sourced files; groups of ranks are comma lists.
# shellcheck disable=SC2034,SC2054
set -euo pipefail
HOIST="$(readlink -f "$1")" MKCKPT="$(readlink -f "$2")" N="$3"
here="$(cd "$(dirname "$0")" && pwd)"
HOIST_SRC="$(cd "$here/../.." && pwd)"
source "$HOIST_SRC/tools/env.sh"
source "$here/bed.sh"
source "$here/lib.sh"
hosts_require_bed

WORK="$(mktemp -d /tmp/hoist-hosts.XXXXXX)" BED_WORK="$WORK"
bed_up "$N"
bed_mpi_env
if ((N == 2)); then
  family=qwen3-moe preset=qwen3-moe-tiny shape=(tp=2 ep=4) flags=(--tp 2 --ep 4) world=4
  hosts=(a b) groups=(0,1 2,3)
else
  family=qwen3 preset=qwen3-tiny shape=(tp=2 dp=3) flags=(--tp 2 --dp 3) world=6
  hosts=(a b c) groups=(0,1 2,3 4,5)
fi
names=()
for h in "${hosts[@]}"; do names+=("$(bed_host "$h")"); done
hosts_fixture "$family" "$preset"
model="$WORK/$preset"
hosts_topology "$WORK/topo.yaml" 2 "${shape[@]}" -- "${names[@]}"
bed_hostfile "$WORK/hostfile" 2 "${hosts[@]}"
hosts_reference "$WORK/ref" "$world" --model "$model" "${flags[@]}"
hosts_counts "$WORK/counts.json" "${groups[@]}" -- --model "$model" "${flags[@]}"

for mode in job node; do
  echo "== $N hosts, --dedup $mode"
  bed_mpirun --hostfile "$WORK/hostfile" -np "$world" "$HOIST" load --topology "$WORK/topo.yaml" \
    --model "$model" --device host --dedup "$mode" --no-progress --log-level warn \
    --report-json "$WORK/$mode.json" --dump "$WORK/$mode" >"$WORK/$mode.out" 2>&1 ||
    { echo "FAIL: the load failed:"; cat "$WORK/$mode.out"; exit 1; }
  hosts_same_dumps "$WORK/ref" "$WORK/$mode" "$world"
  python3 "$here/check_report.py" "$WORK/$mode.json" "$WORK/counts.json" "$mode" "${names[@]}"
done

echo "== the topology's nodes in another order than mpirun's hosts"
reversed=()
for ((i = ${#names[@]} - 1; i >= 0; i--)); do reversed+=("${names[$i]}"); done
hosts_topology "$WORK/wrong.yaml" 2 "${shape[@]}" -- "${reversed[@]}"
rc=0
out="$(bed_mpirun --hostfile "$WORK/hostfile" -np "$world" "$HOIST" load \
  --topology "$WORK/wrong.yaml" --model "$model" --device host --no-progress 2>&1)" || rc=$?
[[ $rc == 2 ]] || { echo "FAIL: exit $rc, not 2:"; echo "$out"; exit 1; }
hosts_expect_in "$out" "rank 0 runs on host ${names[0]}, not on node '${reversed[0]}'"
hosts_expect_in "$out" "The launcher placed ${names[0]}: ranks 0-1; ${names[1]}: ranks 2-3"
if [[ $(grep -c "hoist: error:" <<<"$out") != 1 ]]; then
  echo "FAIL: not one error line:"
  echo "$out"
  exit 1
fi
echo "  refused, exit 2: $(grep "hoist: error:" <<<"$out" | cut -c1-160)..."
echo "PASS: $N hosts"
