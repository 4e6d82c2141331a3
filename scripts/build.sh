#!/usr/bin/env bash
# Configures and builds qattn into build/ (or $QATTN_BUILD_DIR). Extra arguments go to CMake;
# QATTN_TARGETS names the ninja targets (default: all), QATTN_JOBS the parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${QATTN_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=${QATTN_BUILD_TYPE:-Release} "$@" >/dev/null
# shellcheck disable=SC2086
ninja -C "$BUILD" ${QATTN_JOBS:+-j$QATTN_JOBS} ${QATTN_TARGETS:-}
