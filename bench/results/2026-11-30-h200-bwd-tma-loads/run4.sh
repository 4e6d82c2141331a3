#!/usr/bin/env bash
# Fourth call: issue 19's backward table through the package at this tree — the same two steps as
# bench/results/2026-11-30-h200-backward/run.sh (parallel --warm builds, then bench_backward.py over
# every config, 2k-16k, one process). Carried: out/carry, out/gpu-py.
exec bash bench/results/2026-11-30-h200-backward/run.sh
