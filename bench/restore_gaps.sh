#!/usr/bin/env bash
# The daemon's restore from its host cache, right after `ctl release` and after a pause, on the
# GPU box: starts `hoist serve --host-cache`, then ROUNDS times releases the weights and restores
# them after each gap in GAPS (seconds), then restores once more with --verify, and stops the
# daemon. The pinned-H2D ceiling is measured before and after (CEILING_BIN, a hoist-bench-h2d).
#   bench/restore_gaps.sh HOIST MODEL_DIR OUT_DIR   (env ROUNDS=5, GAPS="0 0.05 0.5", CEILING_BIN)
# Writes OUT_DIR/restore.txt (one line per restore: the gap and what `ctl restore` printed) and
# OUT_DIR/restore_ceiling.jsonl.
set -uo pipefail
h=$1 model=$2 out=$3
mkdir -p "$out"
ROUNDS="${ROUNDS:-5}"
GAPS="${GAPS:-0 0.05 0.5}"
ceiling() {  # label
  [[ -n "${CEILING_BIN:-}" ]] || return 0
  "$CEILING_BIN" 8 3 | tail -1 | sed "s/^{/{\"kind\":\"$1\",/" >> "$out/restore_ceiling.jsonl"
}
ceiling ceiling_before_restore
sd=$(mktemp -d)
setsid "$h" serve --model "$model" --host-cache --socket-dir "$sd" --log-level warn \
  > "$out/serve.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2> /dev/null; wait $pid 2> /dev/null; rm -rf "$sd"' EXIT
sock=$sd/rank-0.sock
for _ in $(seq 900); do [[ -S $sock ]] && break; kill -0 $pid 2> /dev/null || break; sleep 0.1; done
if [[ ! -S $sock ]]; then
  echo "restore_gaps.sh: hoist serve did not start (see $out/serve.log)" >&2
  exit 1
fi
for _ in $(seq "$ROUNDS"); do
  for gap in $GAPS; do
    "$h" ctl release --socket "$sock" > /dev/null
    sleep "$gap"
    echo "gap $gap: $("$h" ctl restore --socket "$sock" 2>&1 | tr '\n' ' ')" >> "$out/restore.txt"
  done
done
"$h" ctl release --socket "$sock" > /dev/null
echo "verify after release: $("$h" ctl restore --socket "$sock" --verify 2>&1 | tr '\n' ' ')" \
  >> "$out/restore.txt"
kill -TERM $pid
wait $pid 2> /dev/null
trap 'rm -rf "$sd"' EXIT
ceiling ceiling_after_restore
