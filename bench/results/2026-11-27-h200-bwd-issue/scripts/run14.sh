#!/usr/bin/env bash
# the package's backward (and forward + backward) against cuDNN / FA2 after this session's changes
set -uo pipefail
[ -d .cutlass/include/cute ] || tar -xJf out/carry/cutlass.tar.xz
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHON=python3 PYTHONPATH=$PWD/python QATTN_VERBOSE=0
C=llama2-7b-mha,qwen2.5-72b-gqa; S=4096,8192
N=$(python3 bench/bench_backward.py --jobs --configs $C --seqlens $S)
seq 0 $((N-1)) | timeout 330 xargs -P 12 -I{} python3 bench/bench_backward.py --warm {} --configs $C --seqlens $S > $OUT/warm.txt 2>&1
echo "warm rc $? ($N jobs) at $SECONDS s"
timeout 200 python3 bench/bench_backward.py $OUT/results.csv --configs $C --seqlens $S > $OUT/bench.txt 2>&1; echo "bench rc $?"
tail -14 $OUT/bench.txt; echo "done in $SECONDS s"
