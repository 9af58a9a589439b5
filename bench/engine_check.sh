#!/usr/bin/env bash
# GPU check of the example tensor-parallel engine against transformers (bench/engine_check.py):
# small random Qwen3, Qwen3-MoE, Mixtral, GPT-OSS (BF16) and DeepSeek-V2 checkpoints written by
# save_pretrained (bf16), the engine at tp 1 (and tp 2 / ep 2 with NCCL under mpirun when 2 GPUs
# are visible), logits and greedy tokens compared with from_pretrained's. Uses hoist's Python
# package from BUILD (default build/, else build-bench/); when none is built, builds it into
# build-bench/ (Release, the module alone: as bench/bench.sh configures it, with the dlpack
# header of .gpu-deps/ from bench/prepare-device.sh). Results: $OUT/engine_check.md and .jsonl.
#   bench/engine_check.sh   (env: OUT, BUILD, PYTHON, STEPS, ONLY=mixtral,gpt_oss,deepseek_v2,...)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/hoist-engine-check}"; mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
source tools/env.sh
source bench/build_python.sh
export NCCL_NVLS_ENABLE=0
say() { echo "[engine_check.sh $(date +%T)] $*" >&2; }

build="${BUILD:-}"
if [[ -z "$build" ]]; then
  for b in build build-bench; do [[ -d "$b/python/pkg/hoist" ]] && { build=$b; break; }; done
fi
if [[ -z "$build" || ! -d "$build/python/pkg/hoist" ]]; then
  build="${build:-build-bench}"
  say "no hoist Python package under $build/python/pkg/hoist: building it (log: $OUT/engine_check_build.log)"
  if ! build_python "$build" "$OUT/engine_check_build.log" hoist_python; then
    say "building hoist's Python module failed:"; grep -E "error|hoist: " "$OUT/engine_check_build.log" | head -20 >&2
    tail -20 "$OUT/engine_check_build.log" >&2
    exit 2
  fi
  say "built $build/python/pkg/hoist"
fi
[[ "$build" == /* ]] && pkg="$build/python/pkg" || pkg="$root/$build/python/pkg"
say "python: $(command -v "$PYTHON") ($("$PYTHON" --version 2>&1)); hoist package: $pkg"
command -v mpirun > /dev/null || say "mpirun not found: the 2-GPU cases will fail"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total --format=csv >&2

# torch first, as the engine imports it. A failure prints the exit status (a signal: 128 + N) and
# the Python traceback of a crash (PYTHONFAULTHANDLER), probes which import order fails, rebuilds
# the module for $PYTHON when Python could not find or load it, and goes on: the engine runs
# report their own failures.
export PYTHONFAULTHANDLER=1
probe() { PYTHONPATH="$pkg" "$PYTHON" -c "$1; print('ok')" 2>&1; }
err=$(probe "import torch, hoist, hoist.torch"); rc=$?
if ((rc != 0)); then
  say "import torch, hoist, hoist.torch failed with $PYTHON: exit $rc"; echo "$err" | tail -30 >&2
  for p in "import hoist" "import hoist; import torch" "import torch; import hoist"; do
    out=$(probe "$p"); say "probe '$p': exit $? (${out: -400})"
  done
  if [[ "$err" == *ImportError* || "$err" == *ModuleNotFoundError* ]]; then
    say "the extension is built for the HOIST_PYTHON given to cmake; rebuilding the module for $PYTHON"
    extra=()
    "$PYTHON" -m pybind11 --cmakedir > /dev/null 2>&1 && extra+=("-Dpybind11_DIR=$("$PYTHON" -m pybind11 --cmakedir)")
    { cmake -S . -B "$build" -DHOIST_PYTHON="$(command -v "$PYTHON")" "${extra[@]}" &&
      cmake --build "$build" --target hoist_python; } > "$OUT/engine_check_cmake.log" 2>&1 ||
      { say "rebuilding the Python module failed: see $OUT/engine_check_cmake.log"; tail -20 "$OUT/engine_check_cmake.log" >&2; }
    err=$(probe "import torch, hoist, hoist.torch"); say "import after the rebuild: exit $? (${err: -400})"
  fi
  say "going on: each engine run reports its own failure"
fi
say "running bench/engine_check.py"
PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" bench/engine_check.py --out "$OUT" \
  --build-pkg "$pkg" --steps "${STEPS:-8}" ${ONLY:+--only "$ONLY"}
rc=$?
say "done: exit $rc; results in $OUT/engine_check.md"
exit $rc
