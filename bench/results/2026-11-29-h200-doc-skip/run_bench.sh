#!/usr/bin/env bash
# Call C: (1) forward, backward and forward + backward with a document mask against FlexAttention,
# this tree's kernels and the parent commit's (out/parent: 3f91bef's device/, python/ and its stripped
# qattn compiler) in one process; (2) the backward of MLA 192/128 and d256 through the package (the
# natural form on mma.sync, now compiled from compute_90 PTX) against cuDNN and FlashAttention-2.
# This tree's kernels are built first by parallel --warm processes.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 QATTN_VERBOSE=0
W="--configs mla-prefill,mha-d256 --seqlens 4096 --variants document"
n=$(python3 bench/bench_backward.py --jobs $W)
for i in $(seq 0 $((n - 1))); do timeout 240 python3 bench/bench_backward.py $W --warm "$i" > "$OUT/warm_$i.txt" 2>&1 & done
wait
tail -qn1 "$OUT"/warm_*.txt
timeout 300 python3 bench/bench_backward.py "$OUT/results_doc.csv" --configs '' --variants document \
  --also parent=out/parent/device:out/parent/qattn > "$OUT/bench_doc.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_doc.txt"
grep -v Warning "$OUT/bench_doc.txt" | tail -8
timeout 200 python3 bench/bench_backward.py "$OUT/results_mla_d256.csv" --configs mla-prefill,mha-d256 --seqlens 4096 \
  --no-variants > "$OUT/bench_mla_d256.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench_mla_d256.txt"
grep -v Warning "$OUT/bench_mla_d256.txt" | tail -8
