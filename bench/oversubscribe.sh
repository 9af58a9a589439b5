#!/usr/bin/env bash
# Fill threads beyond a rank's cores must not slow its load (issue 44 item 5): the same hot load
# with as many fill threads as the rank's cores (the cpus its placement reports) and with twice as
# many, alternated run by run,
# then again inside a cgroup CPU quota of half the cores (cgroup v2 cpu.max or v1
# cpu.cfs_quota_us, where this machine lets root make one; removed at the end) with the default
# threads and with twice the quota. A benchmark, not a test: CI runs it nowhere. Prints one JSON
# line per run and a verdict per pair; exits 1 when a pair's doubled median is more than
# LIMIT (default 1.25) times its baseline's.
#   bench/oversubscribe.sh BUILD_DIR [MODEL_DIR]   (env DEVICE=host|cuda, RUNS=5, ARGS="--tp 2
#                                                   --rank 1", PRESET=qwen3-moe-mid, LIMIT=1.25)
# Without MODEL_DIR, hoist-mkckpt writes PRESET under /tmp/hoist-oversub-model.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build=$(cd "$1" && pwd)
hoist=$build/launch/hoist
model=${2:-/tmp/hoist-oversub-model}
DEVICE=${DEVICE:-host} RUNS=${RUNS:-5} LIMIT=${LIMIT:-1.25}
source "$root/tools/env.sh"
[[ -f $model/config.json ]] ||
  "$build/tools/hoist-mkckpt" --preset "${PRESET:-qwen3-moe-mid}" --out "$model" --seed 1 > /dev/null
tmp=$(mktemp -d)
cg=""
cleanup() {
  if [[ -n $cg && -d $cg ]]; then
    while read -r p; do echo "$p" > "$(dirname "$cg")/cgroup.procs" 2> /dev/null || true; done < "$cg/cgroup.procs"
    for _ in $(seq 50); do rmdir "$cg" 2> /dev/null && break; sleep 0.1; done  # exited tasks linger
    [[ -d $cg ]] && echo "could not remove $cg" >&2
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Runs one load (in the cgroup when $2 is "quota") and prints its JSON line.
one() {  # label where args...
  local label=$1 where=$2; shift 2
  cat "$model"/*.safetensors > /dev/null
  local run=(env)
  [[ $where == quota ]] && run=(bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg")
  # shellcheck disable=SC2086
  "${run[@]}" "$hoist" load --model "$model" --device "$DEVICE" --log-level warn \
    --report-json "$tmp/r.json" ${ARGS:-} "$@" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; return 1; }
  python3 - "$tmp/r.json" "$label" <<'PY'
import json, sys
k = json.load(open(sys.argv[1]))["ranks"][0]
print(json.dumps({"case": sys.argv[2], "ms": round(k["phases"]["total"]["seconds"] * 1e3, 2),
                  "threads": k.get("fill_threads"), "cpus": k.get("cpus")}), flush=True)
PY
}

# The cgroup: half the cores as a quota (at least one), v2 where the unified hierarchy has the cpu
# controller, else v1's cpu controller.
quota=""
make_quota() {
  local q=$(( cores / 2 > 0 ? cores / 2 : 1 ))
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    echo +cpu > /sys/fs/cgroup/cgroup.subtree_control 2> /dev/null || true
    cg=/sys/fs/cgroup/hoist-oversub-$$
    mkdir "$cg" && echo "$(( q * 100000 )) 100000" > "$cg/cpu.max"
  elif [[ -d /sys/fs/cgroup/cpu ]]; then
    cg=/sys/fs/cgroup/cpu/hoist-oversub-$$
    mkdir "$cg" && echo 100000 > "$cg/cpu.cfs_period_us" && echo $(( q * 100000 )) > "$cg/cpu.cfs_quota_us"
  fi
  quota=$q
}

# The rank's cores: the cpus its default placement reports (a tp 2 rank gets its share).
cpu_count() {
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))["ranks"][0].get("cpus", "")
print(sum(int(b) - int(a) + 1 for a, _, b in (p.partition("-") if "-" in p else (p, "", p)
                                               for p in s.split(",") if p)))' "$1"
}
one "probe" free > /dev/null
cores=$(cpu_count "$tmp/r.json")
(( cores > 0 )) || { echo "the report names no cpus" >&2; exit 1; }
res=$tmp/runs.jsonl
make_quota 2> /dev/null || true
[[ -n $cg && -d $cg ]] || { cg=""; echo "# no cgroup could be made here: the quota pair is skipped" >&2; }
echo "# $cores cores, device $DEVICE, model $model, quota ${quota:-none}" >&2
for i in $(seq "$RUNS"); do
  one "cores x1 ($cores threads)" free --threads "$cores" | tee -a "$res"
  one "cores x2 ($(( 2 * cores )) threads)" free --threads $(( 2 * cores )) | tee -a "$res"
  if [[ -n $cg ]]; then
    one "quota $quota, default threads" quota | tee -a "$res"
    one "quota $quota x2 ($(( 2 * quota )) threads)" quota --threads $(( 2 * quota )) | tee -a "$res"
  fi
done
python3 - "$res" "$LIMIT" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
limit = float(sys.argv[2])
cases = {}
for r in runs: cases.setdefault(r["case"], []).append(r["ms"])
names = list(cases)
bad = 0
for base, over in zip(names[0::2], names[1::2]):
    a, b = statistics.median(cases[base]), statistics.median(cases[over])
    ok = b <= limit * a
    bad += not ok
    print(f"{over}: {b:.1f} ms against {base}: {a:.1f} ms = {b / a:.2f}x "
          f"({'no collapse' if ok else 'COLLAPSE'}, limit {limit}x)")
sys.exit(1 if bad else 0)
PY
