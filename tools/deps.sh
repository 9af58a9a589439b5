#!/usr/bin/env bash
# Installs the Debian packages hoist builds with, when any is missing. Safe to run repeatedly.
# The CUDA toolkit (with NCCL) is not a Debian package here: it is used when found in
# /usr/local/cuda, and hoist builds and tests without it.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libprotobuf-dev protobuf-compiler libspdlog-dev libfmt-dev
      libyaml-cpp-dev libhwloc-dev libopenmpi-dev openmpi-bin libcli11-dev nlohmann-json3-dev
      libgtest-dev libgmock-dev python3 python3-venv
      pybind11-dev libdlpack-dev python3-dev python3-numpy  # embedding API, Python module
      python3-torch  # hoist.torch and the tensor-parallel example engine (gloo on CPU)
      ccache  # tools/test.sh, example.sh and sanitize.sh compile through it
      iproute2 slurmctld slurmd slurm-client)  # tests/hosts: namespaces, tc; a one-node Slurm
if [[ "${HOIST_FUZZ:-1}" == 1 ]]; then pkgs+=(clang-14 libclang-rt-14-dev); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "hoist: installing ${missing[*]}" >&2
  SUDO=""; [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
