#!/usr/bin/env bash
# A slow link between two hosts of the namespace bed (tests/hosts/bed.sh): both veths shaped to
# 1 Gbit/s (tc tbf), the checkpoint in the page cache (read at GB/s). `--dedup auto` must read
# locally rather than forward across the link: every rank reads all it needs from storage,
# nothing is sent or received (check_report.py none), the dumps equal single-process loads, and
# the plan summary says why (`hoist plan`: nothing measured; the load's dedup_reason: the
# measured link and the page cache). With storage said to be slower than the link (the test
# hook HOIST_TEST_STORAGE_GIB_S), auto forwards between the hosts as job does. `--dedup job` on the
# same link still forwards (the shaping breaks nothing; its peer rate is printed beside the read
# rate, no timing asserted). Exit 77 (skipped) with the reason where namespaces are refused.
# MKCKPT, BED_WORK: read by the sourced bed.sh and lib.sh.
# shellcheck disable=SC2034
set -euo pipefail
HOIST="$(readlink -f "$1")" MKCKPT="$(readlink -f "$2")"
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
for h in a b; do
  bed_shape "$h" 1gbit 256kb 50ms
  echo "  $(bed_host "$h"): $(ip netns exec "$(bed_host "$h")" tc qdisc show dev "$(bed_if "$h")")"
done
hosts_fixture qwen3-moe qwen3-moe-tiny
model="$WORK/qwen3-moe-tiny" names=("$(bed_host a)" "$(bed_host b)")
cat "$model"/*.safetensors >/dev/null  # the page cache: reading outruns a 1 Gbit/s link
hosts_topology "$WORK/topo.yaml" 2 tp=2 ep=4 -- "${names[@]}"
bed_hostfile "$WORK/hostfile" 2 a b
hosts_reference "$WORK/ref" 4 --model "$model" --tp 2 --ep 4
hosts_counts "$WORK/counts.json" 0,1 2,3 -- --model "$model" --tp 2 --ep 4
why="across its 2 nodes each node reads its own copy from storage, since a network between hosts"

echo "== hoist plan --dedup auto over the two hosts"
plan_out="$("$HOIST" plan --topology "$WORK/topo.yaml" --model "$model" --dedup auto)"
hosts_expect_in "$plan_out" "dedup auto: none"
hosts_expect_in "$plan_out" "$why"
echo "  $(grep "^dedup auto" <<<"$plan_out")"

# auto-slow: the same auto load with storage said to read at 0.01 GiB/s (a test build's hook),
# slower than the link: auto then forwards between the hosts (job).
for mode in auto job auto-slow; do
  echo "== load --dedup $mode over the 1 Gbit/s link"
  env_args=()
  [[ $mode == auto-slow ]] && env_args=(-x HOIST_TEST_STORAGE_GIB_S=0.01)
  bed_mpirun --hostfile "$WORK/hostfile" -np 4 "${env_args[@]}" "$HOIST" load \
    --topology "$WORK/topo.yaml" --model "$model" --device host --dedup "${mode%-slow}" \
    --no-progress --log-level warn \
    --report-json "$WORK/$mode.json" --dump "$WORK/$mode" >"$WORK/$mode.out" 2>&1 ||
    { echo "FAIL: the load failed:"; cat "$WORK/$mode.out"; exit 1; }
  hosts_same_dumps "$WORK/ref" "$WORK/$mode" 4
  python3 - "$WORK/$mode.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rates = {p["phase"]: p for p in j["phases"]}
for name in ("read", "peer"):
    if name in rates and rates[name]["max_s"] > 0:
        print(f"  {name}: {rates[name]['bytes'] / rates[name]['max_s'] / 1e6:.1f} MB/s "
              f"(slowest rank; tiny model, for information only)")
PY
done
reason_of() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["dedup_reason"])' "$1"; }
# Under mpirun auto measures the link and each host's storage (here: the page cache) and says so.
python3 "$here/check_report.py" "$WORK/auto.json" "$WORK/counts.json" none "${names[@]}"
reason="$(reason_of "$WORK/auto.json")"
echo "  auto: $reason"
hosts_expect_in "$reason" "across its 2 nodes each node reads its own copy from storage: the network between hosts measured"
hosts_expect_in "$reason" "and every host has the checkpoint in its page cache"
python3 "$here/check_report.py" "$WORK/job.json" "$WORK/counts.json" job "${names[@]}"
# Storage slower than the measured link: auto forwards between the hosts, as job does.
python3 "$here/check_report.py" "$WORK/auto-slow.json" "$WORK/counts.json" job "${names[@]}"
reason="$(reason_of "$WORK/auto-slow.json")"
echo "  auto, storage at 0.01 GiB/s: $reason"
hosts_expect_in "$reason" "auto: job (the network between hosts measured"
hosts_expect_in "$reason" "faster than reading storage at 0.01 GiB/s"
echo "PASS: dedup auto reads locally over a slow link from the page cache, forwards when storage is slower, and says why"
