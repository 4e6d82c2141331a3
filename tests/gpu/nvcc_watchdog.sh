#!/usr/bin/env bash
# nvcc with the Hopper kernels' mbarrier watchdog (device/qattn/sm90/ptx.cuh, QATTN_WATCHDOG_CYCLES):
# a wait longer than QATTN_WATCHDOG_CYCLES clock cycles (default 4e9, about 2 s at 1.98 GHz) prints
# the block, warp, barrier offset and parity, and traps: a hang becomes a failed launch with a report.
# Use it as the compiler's nvcc, with a cache of its own (kernels built without the watchdog are not
# rebuilt otherwise):
#   QATTN_NVCC=$PWD/tests/gpu/nvcc_watchdog.sh QATTN_CACHE_DIR=/tmp/qattn-watchdog python3 -m pytest ...
# NVCC_REAL names the real nvcc (default: the nvcc on PATH, else /usr/local/cuda/bin/nvcc).
set -euo pipefail
real=${NVCC_REAL:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
exec "$real" "-DQATTN_WATCHDOG_CYCLES=${QATTN_WATCHDOG_CYCLES:-4000000000}" "$@"
