#!/usr/bin/env bash
# Installs every dependency of qattn from Debian and PyPI. Idempotent: installs only what is missing.
#   Debian: compilers, CMake/Ninja, GoogleTest, nlohmann-json, CLI11, fmt, libcurl, cpp-httplib, pybind11
#   PyPI:   nvidia-cutlass==4.2.0.0 (the CUTLASS/CuTe headers the generated kernels compile against),
#           numpy (the context-parallel tests), pytest (tests/python; torch is NOT installed here: the binding's GPU tests run on a GPU machine)
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

DEB_PKGS=(cmake ninja-build g++ clang libclang-rt-14-dev libgtest-dev libgmock-dev googletest
          nlohmann-json3-dev libcli11-dev libfmt-dev libcurl4-openssl-dev libcpp-httplib-dev
          pybind11-dev)
missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! $PY -c "import cutlass_library, os, sys; sys.exit(0 if os.path.isdir(cutlass_library.source_path + '/include/cute') else 1)" 2>/dev/null; then
  echo "[setup] pip install nvidia-cutlass==4.2.0.0"
  $PY -m pip install -q --disable-pip-version-check nvidia-cutlass==4.2.0.0
fi
if ! $PY -c "import pytest" 2>/dev/null; then
  echo "[setup] pip install pytest (the Python binding's tests, tests/python)"
  $PY -m pip install -q --disable-pip-version-check pytest
fi
if ! $PY -c "import numpy" 2>/dev/null; then
  echo "[setup] pip install numpy (tests/python/test_distributed.py runs the context-parallel ring on numpy)"
  $PY -m pip install -q --disable-pip-version-check numpy
fi
echo "[setup] dependencies present"
