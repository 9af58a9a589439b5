#!/usr/bin/env bash
# CI test of examples/engine_startup.cc on the host backend: embedded under mpirun -np 2 (tp 2),
# then attached to `hoist serve` ranks started alone (--rank); each rank's GEMM check must pass.
# Usage: run_example_test.sh HOIST MKCKPT ENGINE
set -euo pipefail
hoist="$1" mkckpt="$2" engine="$3"
tmp="$(mktemp -d /tmp/hoist-example-XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$mkckpt" --preset qwen3-tiny --out "$tmp/model" --seed 3 --threads 2 >/dev/null

timeout 120 mpirun --oversubscribe -np 2 "$engine" --model "$tmp/model" --tp 2 --device host \
  | tee "$tmp/embedded.txt"
[[ $(grep -c "loaded .* PASS" "$tmp/embedded.txt") == 2 ]]

for r in 0 1; do
  "$hoist" serve --model "$tmp/model" --tp 2 --rank "$r" --device host --socket-dir "$tmp/sock" \
    --log-level warn >"$tmp/serve-$r.log" 2>&1 &
  pids+=($!)
done
for r in 0 1; do
  for _ in $(seq 600); do [[ -S "$tmp/sock/rank-$r.sock" ]] && break; sleep 0.1; done
done
timeout 120 mpirun --oversubscribe -np 2 "$engine" --attach "$tmp/sock" | tee "$tmp/attached.txt"
[[ $(grep -c "attached .* PASS" "$tmp/attached.txt") == 2 ]]
echo "example_engine_startup: embedded and attached checks passed"
