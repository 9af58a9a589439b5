#!/usr/bin/env bash
# Run HERE (not on the GPU box) before a device call: exports the committed tree to .bench-src/
# (ignored by git; name it in the call's `carry`; REF=<commit> exports another commit) with Debian's dlpack header in .gpu-deps/,
# which the GPU box's image lacks. Then on the box: cd .bench-src && bash bench/bench.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
exclude="$(git rev-parse --git-path info/exclude)"  # a worktree's .git is a file
grep -qx "/.bench-src/" "$exclude" 2>/dev/null || echo "/.bench-src/" >> "$exclude"
rm -rf .bench-src && mkdir .bench-src
git archive "${REF:-HEAD}" | tar -x -C .bench-src
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download libdlpack-dev > /dev/null && dpkg -x libdlpack-dev_*.deb x)
mkdir -p .bench-src/.gpu-deps/include
cp -r "$tmp"/x/usr/include/dlpack .bench-src/.gpu-deps/include/
rm -rf "$tmp"
du -sh .bench-src
