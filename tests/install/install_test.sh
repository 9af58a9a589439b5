#!/usr/bin/env bash
# Installs this build as the README says (a virtual environment as the prefix, one
# `cmake --install` step) and uses it from a clean shell that knows nothing of the build tree:
# hoist-mkckpt writes a checkpoint, hoist plans and loads it, `import hoist` loads it in Python,
# and a find_package(hoist) consumer builds and loads it; the final norm's bytes from Python and
# from the consumer must equal the checkpoint's own (read here with a few lines of Python). The
# library's log lines may share stdout, so the checked lines are picked by their prefix.
# Usage: install_test.sh BUILD_DIR CONSUMER_SOURCE_DIR PYTHON
set -euo pipefail
build="$1"
consumer="$2"
python="$3"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/hoist-install-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv --system-site-packages "$tmp/env"
cmake --install "$build" --prefix "$tmp/env" >"$tmp/install.log"
cp -r "$consumer" "$tmp/consumer-src"
cd "$tmp"
env -i HOME="$tmp" PATH=/usr/local/bin:/usr/bin:/bin TMPDIR="${TMPDIR:-/tmp}" \
  bash -euo pipefail -c '
source env/bin/activate
for tool in hoist hoist-mkckpt python3; do
  [[ "$(command -v "$tool")" == "$VIRTUAL_ENV/bin/$tool" ]] || { echo "$tool is not the installed one"; exit 1; }
done
hoist --help >/dev/null
hoist-mkckpt --family qwen3 --preset qwen3-tiny --out model --seed 5 >/dev/null
hoist plan --model model --tp 2 >/dev/null
hoist load --model model --device host --verify --no-progress --log-level warn
want="$(python3 - <<PY
import json, os, struct
index = "model/model.safetensors.index.json"
shard = json.load(open(index))["weight_map"]["model.norm.weight"] if os.path.exists(index) else "model.safetensors"
with open("model/" + shard, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    begin = json.loads(f.read(n))["model.norm.weight"]["data_offsets"][0]
    f.seek(8 + n + begin)
    print(" ".join("%02x" % b for b in f.read(8)))
PY
)"
py="$(python3 -c "
import hoist, os
assert hoist.__file__.startswith(os.environ[\"VIRTUAL_ENV\"]), hoist.__file__
w = hoist.load(\"model\", device=\"host\").tensors()
print(\"norm bytes:\", \" \".join(\"%02x\" % b for b in w[\"model.norm.weight\"].tobytes()[:8]))
" | grep "^norm bytes: " | cut -d" " -f3-)"
cmake -S consumer-src -B consumer-build -DCMAKE_PREFIX_PATH="$VIRTUAL_ENV" >/dev/null
cmake --build consumer-build >/dev/null
out="$(./consumer-build/consumer model | grep "first bytes")"
echo "checkpoint: $want"
echo "python:     $py"
echo "consumer:   $out"
[[ -n "$want" && "$py" == "$want" && "$out" == *"first bytes $want" ]]
# Another interpreter (here a venv without the system packages, so without numpy) is refused at
# import with what to do, not after a load.
site="$(python3 -c "import hoist, os; print(os.path.dirname(os.path.dirname(hoist.__file__)))")"
deactivate
python3 -m venv bare-env
if msg="$(PYTHONPATH="$site" bare-env/bin/python3 -c "import hoist" 2>&1)"; then
  echo "import hoist without numpy should fail"; exit 1
fi
[[ "$msg" == *"has no numpy, so it is not the interpreter"* ]] || { echo "$msg"; exit 1; }
echo "install test: PASS"
'
