#!/usr/bin/env bash
# One call on the GPU box: every architecture as transformers writes it (bench/hf_tiny.py), loaded
# by hoist on the GPU one rank at a time (tp 1, 2, 4 in both layouts; ep 2 for the mixtures of
# experts; the `hoist pack` copy at tp 2) with --dump, and each dump compared with torch slicing by
# vLLM's rules (bench/hf_slices.py). Then the DeepSeek-V3 FP8 fixture's packed copy at tp 2.
# Prints one line per case and a summary; writes $OUT/hf_check.txt.
#   bench/hf_check.sh        (env: OUT, BUILD_DIR (default build-bench), ONLY=mixtral,phi3,...)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/hoist-hf-check}"; mkdir -p "$OUT"
work="${WORK:-/tmp/hoist-hf-check-work}"; rm -rf "$work"; mkdir -p "$work"
source tools/env.sh
log() { echo "[hf_check $(date +%T)] $*" >&2; }

build="${BUILD_DIR:-build-bench}"
if [[ ! -x $build/launch/hoist ]]; then
  log "build"
  extra=()
  [[ -d .gpu-deps/include ]] && extra+=("-DCMAKE_INCLUDE_PATH=$root/.gpu-deps/include")
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF \
    "${extra[@]}" > "$work/cmake.log" 2>&1 || { tail -30 "$work/cmake.log"; exit 1; }
  ninja -C "$build" hoist hoist-mkckpt > "$work/build.log" 2>&1 ||
    { grep -A8 error "$work/build.log" | head -40; exit 1; }
fi
hoist=$build/launch/hoist
log "transformers checkpoints"
# The architectures hoist supports (hf_tiny.py also writes gpt_oss and llama4_text).
ONLY="${ONLY:-llama4_text,llama4_dense,llama4_vlm,gpt_oss,mixtral,minimax_m2,qwen2_moe,qwen3_moe,glm4_moe,glm_moe_dsa,deepseek_v2,qwen3_next,qwen3_5,qwen3_5_moe,gemma3_text,phi3,mistral,llama,gemma3_vlm,qwen3_5_vlm,qwen3_5_moe_vlm}"
python3 bench/hf_tiny.py "$work/hf" --only "$ONLY" > "$work/hf_tiny.log" 2>&1
grep -E "FAILED|tensors" "$work/hf_tiny.log" | grep -v Loading >&2
# The configs and tensor lists transformers wrote (what tests/data/hf keeps).
(cd "$work/hf" && tar czf "$OUT/hf_configs.tgz" manifest.json */config.json)

res="$OUT/hf_check.txt"; : > "$res"
list="$work/dumps.txt"; : > "$list"
pass=0; fail=0
n=0
load() {  # name model tp ep rank layout: a GPU load with --dump, listed for the comparison
  local name=$1 model=$2 tp=$3 ep=$4 rank=$5 layout=$6 d="$work/dump-$((n++))"
  local args=(--tp "$tp" --rank "$rank" --layout "$layout")
  ((ep > 0)) && args+=(--ep "$ep")
  if ! err=$("$hoist" load --model "$model" "${args[@]}" --device cuda --dump "$d" \
      --no-progress 2>&1 > /dev/null); then
    echo "$name tp $tp ep $ep rank $rank $layout: FAIL load: $(echo "$err" | grep error | head -1)" |
      tee -a "$res"
    fail=$((fail + 1))
    return
  fi
  echo "$name ${model%-packed} $d/rank-$rank.safetensors $tp $ep $rank $layout" >> "$list"
}

# gpt_oss in the MXFP4 form the Hub stores it (tests/data/quant/gpt_oss_mxfp4; U8 blocks and
# scales with transformers' names for the rest), written by hoist-mkckpt.
if [[ ",$ONLY," == *",gpt_oss,"* ]]; then
  $build/tools/hoist-mkckpt --config tests/data/quant/gpt_oss_mxfp4/config.json \
    --tensors tests/data/quant/gpt_oss_mxfp4/tensors.json --out "$work/hf/gpt_oss_mxfp4" > /dev/null
fi

for dir in "$work"/hf/*/; do
  name=$(basename "$dir"); model=${dir%/}
  [[ -f $model/config.json ]] || continue
  moe=0; grep -qE '"(num_experts|n_routed_experts|num_local_experts)": [1-9]' \
    "$model/config.json" && moe=1
  layouts="fused hf"
  for layout in $layouts; do
    for tp in 1 2 4; do
      [[ $name == gpt_oss_mxfp4 && $tp == 4 ]] && continue  # 2 blocks of 32: at most tp 2
      for ((r = 0; r < tp; r++)); do load "$name" "$model" $tp 0 $r $layout; done
    done
    if ((moe)); then for r in 0 1; do load "$name" "$model" 1 2 $r $layout; done; fi
  done
  if "$hoist" pack --model "$model" --out "$model-packed" > /dev/null 2>&1; then
    for r in 0 1; do load "$name(packed)" "$model-packed" 2 0 $r "${layouts%% *}"; done
  else
    echo "$name(packed): FAIL pack" | tee -a "$res"; fail=$((fail + 1))
  fi
done
log "comparing $(wc -l < "$list") dumps with torch slicing"
python3 bench/hf_slices.py --batch "$list" | tee -a "$res"
pass=$(grep -c ": PASS" "$res")
fail=$(grep -c ": FAIL" "$res")

log "DeepSeek-V3 FP8 fixture, packed, tp 2"
ds="$work/deepseek-v3-tiny"
$build/tools/hoist-mkckpt --preset deepseek-v3-tiny --out "$ds" > /dev/null
"$hoist" pack --model "$ds" --out "$ds-packed" > /dev/null
for r in 0 1; do
  for m in "$ds" "$ds-packed"; do
    d="$work/ds-$r-$(basename "$m")"
    if "$hoist" load --model "$m" --tp 2 --rank $r --device cuda --dump "$d" --no-progress \
        > "$work/ds.log" 2>&1; then
      echo "deepseek-v3-tiny $(basename "$m") tp 2 rank $r: loaded" | tee -a "$res"
    else
      echo "deepseek-v3-tiny $(basename "$m") tp 2 rank $r: FAIL $(grep error "$work/ds.log" | head -1)" | tee -a "$res"
      fail=$((fail + 1))
    fi
  done
  if cmp -s "$work/ds-$r-deepseek-v3-tiny/rank-$r.safetensors" \
      "$work/ds-$r-deepseek-v3-tiny-packed/rank-$r.safetensors"; then
    echo "deepseek-v3-tiny packed tp 2 rank $r: PASS dump equals the original's" | tee -a "$res"
    pass=$((pass + 1))
  else
    echo "deepseek-v3-tiny packed tp 2 rank $r: FAIL dump differs from the original's" | tee -a "$res"
    fail=$((fail + 1))
  fi
done
# The quantized fixtures (tests/data/quant: GPTQ, AWQ, compressed-tensors, NVFP4, FP8, MXFP4):
# each rank's GPU dump at tp 2 equals its host dump (the tests compare the host path with the
# independent reference), or both refuse alike.
log "quantized fixtures: GPU against host"
for q in tests/data/quant/*/; do
  name=$(basename "$q"); m="$work/quant-$name"
  $build/tools/hoist-mkckpt --config "$q/config.json" --tensors "$q/tensors.json" --out "$m" \
    > /dev/null 2>&1 || { echo "$name: FAIL mkckpt" | tee -a "$res"; fail=$((fail + 1)); continue; }
  for layout in fused hf; do
    for r in 0 1; do
      out=()
      for dev in cuda host; do
        d="$work/q-$name-$layout-$r-$dev"
        "$hoist" load --model "$m" --tp 2 --rank $r --layout $layout --device $dev --dump "$d" \
          --no-progress > "$d.log" 2>&1 && out+=("$d/rank-$r.safetensors") ||
          out+=("$(grep -m1 error "$d.log" | sed 's/.*error: //')")
      done
      if [[ "${out[0]}" == "${out[1]}" && "${out[0]}" != /* ]]; then
        echo "quant $name $layout tp 2 rank $r: PASS refused alike: ${out[0]:0:100}" | tee -a "$res"
        pass=$((pass + 1))
      elif [[ "${out[0]}" == /* && "${out[1]}" == /* ]] && cmp -s "${out[0]}" "${out[1]}"; then
        echo "quant $name $layout tp 2 rank $r: PASS GPU dump equals host dump" | tee -a "$res"
        pass=$((pass + 1))
      else
        echo "quant $name $layout tp 2 rank $r: FAIL cuda '${out[0]:0:80}' host '${out[1]:0:80}'" |
          tee -a "$res"
        fail=$((fail + 1))
      fi
    done
  done
  # Its `hoist pack` copy on the GPU: the same bytes as the original on the host.
  "$hoist" pack --model "$m" --out "$m-packed" > "$work/qpack.log" 2>&1 ||
    { echo "quant $name: FAIL pack $(grep -m1 error "$work/qpack.log")" | tee -a "$res"; fail=$((fail + 1)); continue; }
  for r in 0 1; do
    d="$work/qp-$name-$r"; h="$work/q-$name-fused-$r-host/rank-$r.safetensors"
    [[ -f $h ]] || continue
    if "$hoist" load --model "$m-packed" --tp 2 --rank $r --device cuda --dump "$d" --no-progress \
        > "$d.log" 2>&1 && cmp -s "$d/rank-$r.safetensors" "$h"; then
      echo "quant $name packed tp 2 rank $r: PASS GPU dump equals the original's" | tee -a "$res"
      pass=$((pass + 1))
    else
      echo "quant $name packed tp 2 rank $r: FAIL $(grep -m1 error "$d.log")" | tee -a "$res"
      fail=$((fail + 1))
    fi
  done
done
echo "hf_check: $pass passed, $fail failed" | tee -a "$res"
((fail == 0))
