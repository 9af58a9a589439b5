#!/usr/bin/env bash
# Issue 42 item 2 on the GPU: a pending attach to `hoist serve --device cuda` during a held
# restore: pending at once with final addresses; after wait() every tensor equals the bytes the
# daemon served before its release, at the same addresses; the restore's ctl call succeeds.
# On the box: cd .bench-src && bash bench/attach_pending.sh (PASS/FAIL on stdout; build logs in
# $OUT). Builds hoist with the test hooks into build-a/ (HOIST_TEST_HOLD_RESTORE holds the restore).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
PY=python3
extra=(); "$PY" -m pybind11 --cmakedir > /dev/null 2>&1 && extra+=("-Dpybind11_DIR=$("$PY" -m pybind11 --cmakedir)")
cmake -S . -B build-a -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DHOIST_TEST_HOOKS=ON \
  -DHOIST_PYTHON="$(command -v $PY)" -DCMAKE_INCLUDE_PATH="$PWD/.gpu-deps/include" "${extra[@]}" > "${OUT:-/tmp}/cmake.log" 2>&1
ninja -C build-a -j 16 hoist hoist_python hoist-mkckpt > "${OUT:-/tmp}/build.log" 2>&1 || { tail -20 "${OUT:-/tmp}/build.log"; exit 1; }
W=/tmp/attach-check; rm -rf $W; mkdir -p $W
build-a/tools/hoist-mkckpt --family qwen3 --preset qwen3-tiny --out $W/m --seed 7 > /dev/null
HOIST_TEST_HOLD_RESTORE=$W/gate build-a/launch/hoist serve --model $W/m --device cuda --socket-dir $W/s --host-cache > $W/serve.log 2>&1 &
sp=$!
for i in $(seq 200); do build-a/launch/hoist ctl status --socket $W/s/rank-0.sock > /dev/null 2>&1 && break; sleep 0.1; done
PYTHONPATH=build-a/python/pkg HOIST=build-a/launch/hoist W=$W timeout 120 $PY - <<'PY'
import json, os, subprocess, time
import torch, hoist
W, H = os.environ["W"], os.environ["HOIST"]
path = f"{W}/s/rank-0.sock"
ctl = lambda *a: subprocess.run([H, "ctl", *a, "--socket", path], capture_output=True, text=True)
a = hoist.attach(path)
ref = {k: v.cpu().clone() for k, v in a.tensors().items()}
a.release()
assert ctl("release").returncode == 0
restore = subprocess.Popen([H, "ctl", "restore", "--timeout-s", "120", "--socket", path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
for _ in range(500):
    if json.loads(ctl("status", "--json").stdout)["status"].get("restoring"): break
    time.sleep(0.01)
m = hoist.attach(path, pending_ok=True)
assert m.pending, "not pending during the held restore"
pend = m.tensors()
ptrs = {k: v.data_ptr() for k, v in pend.items()}
differ = sum(not torch.equal(v.cpu(), ref[k]) for k, v in pend.items())
open(f"{W}/gate", "w").close()
m.wait()
assert not m.pending
after = m.tensors()
bad = [k for k, v in after.items() if not torch.equal(v.cpu(), ref[k]) or v.data_ptr() != ptrs[k]]
out, _ = restore.communicate(timeout=60)
print(f"tensors {len(ref)}, differing while pending {differ}, after wait wrong {len(bad)}, "
      f"restore exit {restore.returncode}: {out.strip()[:200]}")
m.release()
print("PASS" if not bad and restore.returncode == 0 else "FAIL")
PY
rc=$?
kill -TERM $sp; wait $sp; echo "serve exit $?"; tail -5 $W/serve.log
exit $rc
