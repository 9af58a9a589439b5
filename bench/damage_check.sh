#!/usr/bin/env bash
# Damaged packed copies on a device (docs/PACKED.md, "Integrity"): for each preset, hoist-mkckpt
# writes a checkpoint and `hoist pack` a packed copy, which must load on DEVICE with --verify and
# give the original's dump (--dump folders); then, one at a time, a byte inside a block's payload is flipped (a
# stored stream's value, a coded stream's raw sign/mantissa byte): the load must fail with exit 1
# and a message naming the tensor, and the copy is restored before the next flip. Checks that
# need no GPU run in CI (tests/transport/packed); this is the GPU's side of them.
#   bench/damage_check.sh BUILD_DIR   (env DEVICE=cuda, PRESETS="qwen3-tiny qwen3-fp8-tiny",
#                                      WORK=/tmp/hoist-damage; prints one line per case and
#                                      "damage_check: N passed, M failed"; exit 1 on a failure)
set -euo pipefail
build=$(cd "$1" && pwd)
hoist=$build/launch/hoist
mkckpt=$build/tools/hoist-mkckpt
DEVICE="${DEVICE:-cuda}"
WORK="${WORK:-/tmp/hoist-damage}"
rm -rf "$WORK" && mkdir -p "$WORK"
passed=0 failed=0
check() {  # name, condition (0 = pass)
  if [[ $2 == 0 ]]; then passed=$((passed + 1)); echo "pass: $1"; else
    failed=$((failed + 1)); echo "FAIL: $1"; fi
}
# Prints "tensor offset" of the first stream whose method is $2 (0 stored, 1 Huffman), the offset
# being the shard byte to flip: the payload's byte 5 (a value of a stored block, a raw byte of a
# coded one; both are covered by nothing but the block's checksum).
pick() {  # packed_dir method
  python3 - "$1" "$2" <<'EOF'
import json, struct, sys
d, want = sys.argv[1], int(sys.argv[2])
idx = json.load(open(d + "/hoist-packed.json"))
for name, t in sorted(idx["tensors"].items()):
    for s in t["streams"]:
        with open(d + "/" + t["file"], "rb") as f:
            f.seek(s["offset"]); h = f.read(32)
        if h[7] == want and struct.unpack_from("<Q", h, 8)[0] >= 64:
            print(name, t["file"], s["offset"] + struct.unpack_from("<I", h, 28)[0] + 5)
            sys.exit(0)
sys.exit(1)
EOF
}
flip() {  # file offset
  python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2]))
f.write(bytes([b[0] ^ 0x10]))' "$1" "$2"
}
for preset in ${PRESETS:-qwen3-tiny qwen3-fp8-tiny}; do
  m=$WORK/$preset p=$WORK/$preset-packed
  "$mkckpt" --preset "$preset" --out "$m" --seed 3 > /dev/null
  "$hoist" pack --model "$m" --out "$p" > /dev/null
  rm -rf "$WORK/want" "$WORK/got"
  "$hoist" load --model "$m" --device "$DEVICE" --dump "$WORK/want" --log-level warn \
    > "$WORK/out.txt" 2>&1
  rc=0; "$hoist" load --model "$p" --device "$DEVICE" --verify --dump "$WORK/got" \
    --log-level warn > "$WORK/out.txt" 2>&1 || rc=$?
  [[ $rc == 0 ]] && diff -rq "$WORK/want" "$WORK/got" > /dev/null || rc=1
  check "$preset: the packed copy loads on $DEVICE, verified, equal to the original" $rc
  [[ $rc == 0 ]] || tail -5 "$WORK/out.txt"
  for method in 0 1; do
    read -r tensor file at < <(pick "$p" $method) || { echo "note: $preset has no stream of" \
      "method $method"; continue; }
    flip "$p/$file" "$at"
    rc=0; "$hoist" load --model "$p" --device "$DEVICE" --log-level warn > "$WORK/out.txt" 2>&1 ||
      rc=$?
    flip "$p/$file" "$at"
    ok=1; [[ $rc == 1 ]] && grep -qF "$tensor" "$WORK/out.txt" && ok=0
    check "$preset: a flipped byte at $file:$at ($tensor, method $method) -> exit $rc" $ok
    [[ $ok == 0 ]] || sed -n 1,5p "$WORK/out.txt"
  done
done
echo "damage_check: $passed passed, $failed failed"
[[ $failed == 0 ]]
