# Sourced by tests/hosts/*_test.sh after bed.sh: hoist's side of the cross-host tests.
# HOIST and MKCKPT are the binaries under test (the tests' first two arguments); WORK a scratch
# folder every host sees (removed by bed_down).
# shellcheck shell=bash

# Prints the reason and exits 77 (ctest's SKIP_RETURN_CODE for these tests) when the machine
# cannot run the bed: never a silent pass.
hosts_require_bed() {
  local why
  if ! why="$(bed_can_run)"; then
    echo "SKIPPED: $why"
    exit 77
  fi
}

# As hosts_require_bed, for the tests that shape the bed's links with tc.
hosts_require_shaping() {
  local why
  if ! why="$(bed_can_shape)"; then
    echo "SKIPPED: $why"
    exit 77
  fi
}

# Writes a checkpoint of hoist-mkckpt's `preset` to $WORK/<preset>.
hosts_fixture() {
  local family="$1" preset="$2"
  "$MKCKPT" --family "$family" --preset "$preset" --out "$WORK/$preset" --seed 41 >/dev/null
}

# Writes a topology file: hosts_topology FILE PER_HOST KEY=VALUE... -- HOST...: every option
# given as a top-level key, then PER_HOST GPUs on each named host.
hosts_topology() {
  local file="$1" per="$2" gpus="" g
  shift 2
  : >"$file"
  while [[ $1 != -- ]]; do echo "${1%%=*}: ${1#*=}" >>"$file"; shift; done
  shift
  for ((g = 0; g < per; g++)); do gpus+="${gpus:+, }$g"; done
  echo "nodes:" >>"$file"
  for h in "$@"; do echo "  - {name: $h, gpus: [$gpus]}" >>"$file"; done
}

# Each rank of `world` loaded alone by one process (no MPI, no peers): the dumps every
# cross-host load must equal, in DIR/rank-R.safetensors. hosts_reference DIR WORLD LOAD_ARGS...
hosts_reference() {
  local dir="$1" world="$2" r
  shift 2
  mkdir -p "$dir"
  for ((r = 0; r < world; r++)); do
    "$HOIST" load "$@" --rank "$r" --device host --dedup none --no-progress --log-level warn \
      --dump "$dir/solo-$r" >"$dir/solo-$r.log" 2>&1 ||
      { echo "FAIL: the single-process load of rank $r:"; cat "$dir/solo-$r.log"; return 1; }
    mv "$dir/solo-$r/rank-$r.safetensors" "$dir/rank-$r.safetensors"
    rmdir "$dir/solo-$r"
  done
}

# Byte-for-byte: every rank's dump in DIR equals the reference's.
hosts_same_dumps() {
  local ref="$1" dir="$2" world="$3" r
  for ((r = 0; r < world; r++)); do
    if ! cmp "$ref/rank-$r.safetensors" "$dir/rank-$r.safetensors"; then
      echo "FAIL: rank $r's dump in $dir differs from the single-process load's"
      return 1
    fi
  done
  echo "  dumps of ranks 0-$((world - 1)) equal the single-process loads byte for byte"
}

# The independent byte counts of a plain plan for the given rank groups (plan_bytes.py).
# hosts_counts OUT GROUPS -- PLAN_ARGS...
hosts_counts() {
  local out="$1" groups=()
  shift
  while [[ $1 != -- ]]; do groups+=("$1"); shift; done
  shift
  "$HOIST" plan "$@" --dedup none --out "$WORK/plain.pb" >/dev/null
  protoc --decode=hoist.proto.LoadPlan -I "$HOIST_SRC/proto" "$HOIST_SRC/proto/plan.proto" \
    <"$WORK/plain.pb" >"$WORK/plain.txt"
  python3 "$BED_DIR/plan_bytes.py" "$WORK/plain.txt" "${groups[@]}" >"$out"
}

# Fails unless `text` contains `needle`, printing both.
hosts_expect_in() {
  local text="$1" needle="$2"
  if [[ $text != *"$needle"* ]]; then
    echo "FAIL: expected to find: $needle"
    echo "in: $text"
    return 1
  fi
}
