#!/usr/bin/env bash
# libhoist.so is free of the command line: it exports no CLI:: (CLI11) symbol, and neither it
# (hoist_shared) nor the static hoist_embed links hoist_launch or CLI11::CLI11. CLOSURES is the
# file tests/install/CMakeLists.txt writes at configure time, one line per target:
# "TARGET: every library it links, transitively". The `hoist` binary's line must name both, and
# the library must export hoist::Load, so that a broken walk or a broken nm fails here too.
# Usage: library_deps_test.sh LIBHOIST_SO CLOSURES
set -euo pipefail
lib="$1"
closures="$2"
[[ -r "$closures" && -r "$lib" ]] || { echo "FAIL: cannot read $closures or $lib"; exit 1; }
fail=0

closure() {  # the libraries TARGET links, one per line
  grep "^$1: " "$closures" | cut -d: -f2- | tr ' ' '\n' | grep -v '^$' || true
}
for target in hoist_shared hoist_embed; do
  [[ -n "$(closure "$target")" ]] || { echo "FAIL: no link closure for $target"; fail=1; }
  grep -qx hoist_config <(closure "$target") ||
    { echo "FAIL: $target does not link hoist_config (the walk is broken)"; fail=1; }
  for banned in hoist_launch CLI11::CLI11; do
    if grep -qx "$banned" <(closure "$target"); then
      echo "FAIL: $target links $banned: $(closure "$target" | tr '\n' ' ')"
      fail=1
    fi
  done
done
for needed in hoist_launch CLI11::CLI11; do
  grep -qx "$needed" <(closure hoist) ||
    { echo "FAIL: the walk does not see that hoist links $needed"; fail=1; }
done

symbols="$(nm -D --defined-only -C "$lib")"
grep -q 'hoist::Load(' <<<"$symbols" ||
  { echo "FAIL: $lib exports no hoist::Load (nm or the library is broken)"; fail=1; }
cli="$(grep -c 'CLI::' <<<"$symbols" || true)"
if [[ "$cli" != 0 ]]; then
  echo "FAIL: $lib exports $cli CLI:: symbols, e.g.:"
  grep -m5 'CLI::' <<<"$symbols"
  fail=1
fi
[[ $fail == 0 ]] && echo "libhoist without CLI: PASS ($lib exports no CLI:: symbol; links no launch/)"
exit $fail
