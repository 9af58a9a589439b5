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

# The command line: --help exits 0 with the usage; a bad flag exits 2 naming it.
"$engine" --help | grep -q -- "--weight NAME"
rc=0; "$engine" --model "$tmp/model" --bogus 2>"$tmp/bad.txt" || rc=$?
[[ $rc == 2 ]] && grep -q "unknown argument '--bogus'" "$tmp/bad.txt"

# DeepSeek-V3 keeps its projections in FP8: the example picks a BF16 weight (the router gate)
# and says which; a --weight that is not 2-D BF16 is refused by name (exit 2).
"$mkckpt" --preset deepseek-v3-tiny --out "$tmp/ds" --seed 5 --threads 2 >/dev/null
timeout 120 mpirun --oversubscribe -np 1 "$engine" --model "$tmp/ds" --device host \
  | tee "$tmp/ds.txt"
grep -q "loaded .*\.mlp\.gate\.weight \[8 x 256\] .* PASS" "$tmp/ds.txt"
rc=0
timeout 120 mpirun --oversubscribe -np 1 "$engine" --model "$tmp/ds" --device host \
  --weight model.layers.0.self_attn.o_proj.weight 2>"$tmp/ds-bad.txt" || rc=$?
[[ $rc == 2 ]] && grep -q "o_proj.weight is F8_E4M3 with 2 dimensions" "$tmp/ds-bad.txt"

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
