#!/usr/bin/env bash
# The backward pass through the Python package on a GPU (issue 19), one command on a lent H100/H200:
#   - `qattn generate --backward` (plan, translate, nvcc, then python -m qattn.verify / qattn.timing on
#     the backward library) for llama3.2-1b, in the background;
#   - the pytest cases of tests/python/test_gpu_training.py for attention() under autograd (gradients against
#     fp32 autograd, a training step against SDPA) and the error cases.
# Usage (OUT set by the device runner): bash tests/gpu/bwd_python_suite.sh [all|core|variants], with out/gpu-py holding the
# compiler (stripped qattn + lib/) and .cutlass/include the CUTLASS headers.
set -u
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHON=python3 PYTHONPATH=$PWD/python QATTN_VERBOSE=0
mkdir -p $OUT
( timeout 280 $QATTN_BIN generate --preset llama3.2-1b --gpu h100 --backward --out /tmp/g1 > $OUT/generate_bwd.txt 2>&1; echo "exit $?" >> $OUT/generate_bwd.txt ) &
# PART (first argument): all (default), core or variants. The 8-warp backward kernels take about a
# minute of nvcc each and `all` builds about nine (535 s on an H200, 2026-11-27): where a call's
# limit is 600 s, run `core` and `variants` as two calls.
case "${1:-all}" in
  core) K="backward_matches or deterministic or training_step or opcheck or errors_are_exceptions" ;;
  variants) K="score_variants or trains_through" ;;
  *) K="backward or deterministic or training_step or trains_through or opcheck or errors_are_exceptions" ;;
esac
timeout 580 python3 -m pytest -q tests/python/test_gpu_training.py tests/python/test_gpu.py -k "$K" -rs > $OUT/pytest_bwd.txt 2>&1
echo "pytest exit $?" >> $OUT/pytest_bwd.txt
wait
tail -30 $OUT/pytest_bwd.txt
tail -40 $OUT/generate_bwd.txt
