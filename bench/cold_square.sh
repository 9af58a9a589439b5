#!/usr/bin/env bash
# Cold loads against an O_DIRECT reader on the GPU box, every side in every position alike. Cold
# runs depend on their position (measured 2026-12-03: the first load after the reader or a pause ran up to 40%
# slower or faster than the next), so a reader run once per round is no fair ceiling: here the
# reader is one more side, and each round runs the sides in one row of a Williams square (each
# side in each position once per square, and right after each other side once; for an odd number
# of sides the square has twice the rows and each follows each twice), the page cache dropped
# before every run (the script stops when it cannot drop it).
#   bench/cold_square.sh HOIST READER MODEL_DIR     (env SQUARES=1, SIDES, READER_ARGS)
# SIDES: ';'-separated NAME=ARGS for `hoist load` ("direct=--read direct;auto=--read auto");
# READER (a hoist-bench-io) is the side named reader, with READER_ARGS (default: 16 threads x 16
# queued 4 MiB requests, 1 GiB in flight). Prints one JSON line per run on stdout as it is
# measured (side, round, position, GiB/s, seconds; for loads the fill threads, the ring's slots,
# whether it read deep and the bytes resident at its start; "failed" with what failed instead);
# bench/summarize_cold.py turns them into a table. Exits 1 when a run failed.
set -uo pipefail
hoist=$1 reader=$2 model=$3
SQUARES="${SQUARES:-1}"
SIDES="${SIDES:-direct=--read direct;auto=--read auto}"
READER_ARGS="${READER_ARGS:---threads 16 --chunk-mib 4 --depth 16}"
declare -A args=()
names=(reader)
IFS=';' read -r -a specs <<< "$SIDES"
for s in "${specs[@]}"; do names+=("${s%%=*}"); args[${s%%=*}]="${s#*=}"; done
report=$(mktemp)
trap 'rm -f "$report"' EXIT

failures=0
failed() {  # side round position why
  failures=$((failures + 1))
  echo "{\"side\": \"$1\", \"round\": $2, \"pos\": $3, \"failed\": \"$4\"}"
}

run() {  # side round position
  sync
  # Without this every "cold" run would be hot: stop rather than measure the page cache.
  if ! echo 3 > /proc/sys/vm/drop_caches; then
    echo "cold_square.sh: cannot drop the page cache (run as root)" >&2
    exit 1
  fi
  if [[ $1 == reader ]]; then
    # shellcheck disable=SC2086
    "$reader" $READER_ARGS "$model"/*.safetensors 2> /dev/null | tail -1 | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
print(json.dumps({"side": "reader", "round": int(sys.argv[1]), "pos": int(sys.argv[2]),
                  "gib_s": d["gib_s"], "s": d["seconds"]}))' "$2" "$3" 2> /dev/null ||
      failed "$1" "$2" "$3" "the reader"
    return
  fi
  rm -f "$report"  # a load that writes none must not be scored with the last one's
  # shellcheck disable=SC2086
  if ! "$hoist" load --model "$model" ${args[$1]} --log-level warn --no-progress \
      --report-json "$report" > /dev/null 2>&1; then
    failed "$1" "$2" "$3" "the load"
    return
  fi
  python3 - "$report" "$1" "$2" "$3" <<'PY' || failed "$1" "$2" "$3" "no report"
import json, sys
r = json.load(open(sys.argv[1]))["ranks"][0]
t = r["phases"]["total"]["seconds"]
print(json.dumps({"side": sys.argv[2], "round": int(sys.argv[3]), "pos": int(sys.argv[4]),
                  "gib_s": r["bytes_h2d"] / 2**30 / t, "s": t, "threads": r.get("fill_threads"),
                  "slots": r.get("staging_slots"), "deep": r.get("deep_read", False),
                  "resident": r.get("bytes_resident_at_start", 0)}))
PY
}

# Williams square rows for n sides: 0, 1, n-1, 2, n-2, ... shifted by the row; for odd n the
# rows reversed follow, so that each side follows each other side equally often.
mapfile -t rows < <(python3 - "${#names[@]}" <<'PY'
import sys
n = int(sys.argv[1])
first, lo, hi = [0], 1, n - 1
while len(first) < n:
    first.append(lo); lo += 1
    if len(first) < n:
        first.append(hi); hi -= 1
rows = [[(x + i) % n for x in first] for i in range(n)]
if n % 2:
    rows += [list(reversed(r)) for r in rows]
for r in rows:
    print(" ".join(map(str, r)))
PY
)
round=0
for _ in $(seq "$SQUARES"); do
  for row in "${rows[@]}"; do
    round=$((round + 1)) pos=0
    for k in $row; do
      pos=$((pos + 1))
      run "${names[$k]}" "$round" "$pos"
    done
  done
done
[[ $failures == 0 ]] || { echo "cold_square.sh: $failures runs failed" >&2; exit 1; }
