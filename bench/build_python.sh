# Sourced by the bench scripts that need hoist's Python module (bench/engine_check.sh,
# bench/overlap.sh): build_python BUILD_DIR LOG TARGET... configures a Release build without
# tests for $PYTHON (with pybind11's CMake package where pip installed it, and the dlpack header
# bench/prepare-device.sh carries) and builds the targets; the log goes to LOG. Returns non-zero
# on failure (the caller says what failed and exits).
build_python() {
  local build=$1 log=$2; shift 2
  local extra=() gen=()
  [[ -d .gpu-deps/include ]] && extra+=("-DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include")
  "$PYTHON" -m pybind11 --cmakedir > /dev/null 2>&1 &&
    extra+=("-Dpybind11_DIR=$("$PYTHON" -m pybind11 --cmakedir)")
  command -v ninja > /dev/null && gen=(-G Ninja)
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF \
    -DHOIST_PYTHON="$(command -v "$PYTHON")" "${extra[@]}" > "$log" 2>&1 &&
    cmake --build "$build" --target "$@" -j "$(nproc)" >> "$log" 2>&1
}
