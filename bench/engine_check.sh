#!/usr/bin/env bash
# GPU check of the example tensor-parallel engine against transformers (bench/engine_check.py):
# small random Qwen3 and Qwen3-MoE checkpoints written by save_pretrained (bf16), the engine at
# tp 1 (and tp 2 / ep 2 with NCCL under mpirun when 2 GPUs are visible), logits and greedy
# tokens compared with from_pretrained's. Assumes hoist is built (BUILD, default build/, else
# build-bench/ as bench/bench.sh builds it). Results: $OUT/engine_check.md and .jsonl.
#   bench/engine_check.sh          (env: OUT, BUILD, PYTHON, STEPS, ONLY=qwen3-moe,...)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/hoist-engine-check}"; mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
source tools/env.sh
export NCCL_NVLS_ENABLE=0
say() { echo "[engine_check.sh $(date +%T)] $*" >&2; }

build="${BUILD:-}"
if [[ -z "$build" ]]; then
  for b in build build-bench; do [[ -d "$b/python/pkg/hoist" ]] && { build=$b; break; }; done
fi
if [[ -z "$build" || ! -d "$build/python/pkg/hoist" ]]; then
  say "no hoist Python package under ${build:-build/ or build-bench/}/python/pkg/hoist:"
  say "build hoist first (bench/bench.sh, or cmake with pybind11 found), then rerun"
  exit 2
fi
[[ "$build" == /* ]] && pkg="$build/python/pkg" || pkg="$root/$build/python/pkg"
say "python: $(command -v "$PYTHON") ($("$PYTHON" --version 2>&1)); hoist package: $pkg"
command -v mpirun > /dev/null || say "mpirun not found: the 2-GPU cases will fail"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total --format=csv >&2

if ! err=$(PYTHONPATH="$pkg" "$PYTHON" -c "import hoist, hoist.torch" 2>&1); then
  say "import hoist failed with $PYTHON:"; echo "$err" >&2
  say "the extension is built for the HOIST_PYTHON given to cmake; rebuilding the module for $PYTHON"
  extra=()
  "$PYTHON" -m pybind11 --cmakedir > /dev/null 2>&1 && extra+=("-Dpybind11_DIR=$("$PYTHON" -m pybind11 --cmakedir)")
  if ! { cmake -S . -B "$build" -DHOIST_PYTHON="$(command -v "$PYTHON")" "${extra[@]}" > "$OUT/engine_check_cmake.log" 2>&1 &&
         cmake --build "$build" --target hoist_python >> "$OUT/engine_check_cmake.log" 2>&1; }; then
    say "rebuilding the Python module failed: see $OUT/engine_check_cmake.log"; tail -20 "$OUT/engine_check_cmake.log" >&2
    exit 2
  fi
  if ! err=$(PYTHONPATH="$pkg" "$PYTHON" -c "import hoist, hoist.torch" 2>&1); then
    say "import hoist still fails:"; echo "$err" >&2; exit 2
  fi
fi
say "running bench/engine_check.py"
PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" bench/engine_check.py --out "$OUT" \
  --build-pkg "$pkg" --steps "${STEPS:-8}" ${ONLY:+--only "$ONLY"}
rc=$?
say "done: exit $rc; results in $OUT/engine_check.md"
exit $rc
