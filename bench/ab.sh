#!/usr/bin/env bash
# A/B in one call on the GPU box: the same `hoist load` commands from two builds, alternated run
# by run on one machine, hot page cache, so that a change is judged against the code before it
# under identical conditions (machines of one kind differ by more than most changes).
#   bench/ab.sh OLD_HOIST NEW_HOIST MODEL_DIR      (env RUNS=5, CASES="tp1|... ;", TEMP=hot|cold:
#                                                   cold drops the page cache before every run;
#                                                   OLD_MODEL: the old build's own copy of the
#                                                   model, e.g. a packed copy in its format)
# CASES: ';'-separated argument lists for `hoist load`; each case runs RUNS times per build. OLD and
# NEW may be the same binary: the cases then compare options of one build.
# Prints one JSON line per run (build, case, load ms, the process's wall ms, the bytes moved to
# the device and the rank's logical bytes, phases with their busy time and their starts relative
# to `total`, and the round) on stdout. TRACE_DIR: the first round's runs also write Chrome
# traces there (BUILD-CASEINDEX.json, for bench/lanes.py). CEILING_BIN (a hoist-bench-h2d): each
# round first measures the pinned-H2D ceiling (8 GiB, 3 copies) and prints it as a "ceiling" line,
# so that bench/summarize_ab.py rates each run against its own round's ceiling (on the H200 box
# the ceiling moved 6% within minutes: measured 2026-12-03). READER_BIN (a hoist-bench-io; for TEMP=cold): each
# round first drops the page cache and reads the model's shards with that O_DIRECT reader
# (READER_ARGS, default "--threads 16 --chunk-mib 4 --depth 16"), printed as the round's "ceiling"
# line with "what": "reader", so cold runs are rated against the storage of their own round.
# WARMUP=0 skips the first unrecorded run of each case and build.
set -euo pipefail
old=$1 new=$2 model=$3
declare -A models=([old]="${OLD_MODEL:-$model}" [new]="$model")
RUNS="${RUNS:-5}"
CASES="${CASES:---read auto;--read auto --staging mallochost;--tp 2 --rank 1}"
tmp=$(mktemp -d)
if [[ "${TEMP:-hot}" == cold ]]; then
  warm() { sync; echo 3 > /proc/sys/vm/drop_caches; }
else
  # A plain checkpoint's shards are *.safetensors, a packed copy's *.bin (docs/PACKED.md).
  warm() { cat "${1:-$model}"/*.safetensors "${1:-$model}"/*.bin > /dev/null 2>&1 || true; }
fi
IFS=';' read -r -a cases <<< "$CASES"
if [[ "${WARMUP:-1}" != 0 ]]; then
  for c in "${cases[@]}"; do
    for b in old new; do warm "${models[$b]}"; ${!b} load --model "${models[$b]}" --log-level warn $c > /dev/null 2>&1 || true; done
  done
fi
# Runs interleave the cases round by round (and the builds within a case, their order swapped
# every round), so that a drift of the machine over the call, and the position within a round,
# fall on every case and build alike.
for i in $(seq "$RUNS"); do
  if [[ -n "${READER_BIN:-}" ]]; then
    sync; echo 3 > /proc/sys/vm/drop_caches
    # shellcheck disable=SC2086
    "$READER_BIN" ${READER_ARGS:---threads 16 --chunk-mib 4 --depth 16} "$model"/*.safetensors 2>/dev/null |
      python3 -c 'import json, sys
ds = [json.loads(l) for l in sys.stdin if l.startswith("{")]
d = max(ds, key=lambda d: d["gib_s"])
print(json.dumps({"kind": "ceiling", "what": "reader", "round": int(sys.argv[1]), "gib_s": d["gib_s"], "seconds": d["seconds"]}))' "$i"
  fi
  if [[ -n "${CEILING_BIN:-}" ]]; then
    "$CEILING_BIN" 8 3 | python3 -c 'import json, sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])
print(json.dumps({"kind": "ceiling", "round": int(sys.argv[1]), "gib_s": d["gib_s"], "runs_ms": d["runs_ms"]}))' "$i"
  fi
  for ci in "${!cases[@]}"; do
    c=${cases[$ci]}
    # Odd rounds run OLD first, even rounds NEW first: the run after a different case (or the
    # ceiling) can be slower than the next, by 4-8% for cold loads in a 2026-12-03 measurement (call 3).
    order=(old new)
    if (( i % 2 == 0 )); then order=(new old); fi
    for b in "${order[@]}"; do
      trace=()
      if [[ -n "${TRACE_DIR:-}" && $i == 1 ]]; then trace=(--trace "$TRACE_DIR/$b-$ci.json"); fi
      warm "${models[$b]}"
      t0=$(date +%s%N)
      if ${!b} load --model "${models[$b]}" --log-level warn --report-json "$tmp/r.json" "${trace[@]}" $c > "$tmp/log" 2>&1; then
        t1=$(date +%s%N)
        python3 - "$tmp/r.json" "$b" "$c" "$(( (t1 - t0) / 1000 ))" "${TEMP:-hot}" "$i" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); k = r["ranks"][0]
ph = k["phases"]; t0 = ph["total"].get("start_s", 0)
print(json.dumps({"kind": "ab", "build": sys.argv[2], "case": sys.argv[3], "temp": sys.argv[5],
                  "round": int(sys.argv[6]),
                  "ms": ph["total"]["seconds"] * 1e3, "process_ms": int(sys.argv[4]) / 1e3,
                  "bytes": k["bytes_h2d"], "logical_bytes": ph["total"].get("bytes", 0),
                  "phases": {n: round(p["seconds"] * 1e3, 2) for n, p in ph.items()},
                  "busy": {n: round(p.get("busy_s", 0) * 1e3, 2) for n, p in ph.items()},
                  "starts": {n: round((p.get("start_s", 0) - t0) * 1e3, 2) for n, p in ph.items()}}))
PY
      else
        echo "{\"kind\": \"ab\", \"build\": \"$b\", \"case\": \"$c\", \"failed\": true}"; tail -3 "$tmp/log" >&2
      fi
    done
  done
done
rm -rf "$tmp"
