#!/usr/bin/env bash
# Configures and builds qattn into build/ (or $QATTN_BUILD_DIR). Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${QATTN_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=${QATTN_BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
ninja -C "$BUILD" ${QATTN_JOBS:+-j$QATTN_JOBS}
