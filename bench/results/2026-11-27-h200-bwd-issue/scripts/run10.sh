#!/usr/bin/env bash
# d64 backward: the planner's BM=128 against BM=64 (a TL edit), same process
set -uo pipefail
ROOT=$PWD; K=/tmp/kk10; rm -rf $K; mkdir -p $K
[ -d .cutlass/include/cute ] || tar -xJf out/carry/cutlass.tar.xz
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
P='--preset llama3.2-1b --heads 16,16'
bash tests/gpu/build_bwd_kernels.sh $K --bin out/gpu-py --only '^(b|m)_' -j 16 \
  --extra "b_c|$P" --extra "b_n|$P --mask none" \
  --extra "m_c|$P|s/BM = 128, BN = 128/BM = 64, BN = 128/" --extra "m_n|$P --mask none|s/BM = 128, BN = 128/BM = 64, BN = 128/" 2>&1 | tail -5
python3 tests/gpu/bwd_check.py $K/m_*.so --random 4 2>&1 | grep -v ": ok " | tail -3
python3 tests/gpu/bwd_check.py $K/b_c.so $K/m_c.so $K/b_n.so $K/m_n.so --shapes '1,2,2,77,130' --bench \
  --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384' --csv $OUT/ab_d64_bm.csv 2>&1 | grep -v ": ok\|exceed" | tail -13
