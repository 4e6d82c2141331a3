#!/usr/bin/env bash
# ncu of the dev2 d128 kernel (no mask)
set -uo pipefail
ROOT=$PWD; K=/tmp/kk6; rm -rf $K; mkdir -p $K
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
bash tests/gpu/build_bwd_kernels.sh $K --bin out/gpu-py --only '^$' -j 16 --cu "dev2_n=$ROOT/out/ab_var2/dev2/dev2_n.cu" --cu "dev2_c=$ROOT/out/ab_var2/dev2/dev2_c.cu" 2>&1 | tail -3
for n in n c; do
timeout 200 ncu --clock-control none -k 'regex:sm90$' --launch-skip 5 --launch-count 1 --set full --import-source yes -o $OUT/dev2_$n \
  python3 tests/gpu/bwd_check.py $K/dev2_$n.so --shapes '1,2,2,77,130' --bench --bench-shapes '4,16,16,4096,4096' > $OUT/ncu_log_$n.txt 2>&1; echo ncu rc $?
ncu -i $OUT/dev2_$n.ncu-rep --page details > $OUT/dev2_${n}_details.txt 2>&1
ncu -i $OUT/dev2_$n.ncu-rep --page source --csv --print-source sass > $OUT/dev2_${n}_sass.csv 2>&1
rm -f $OUT/dev2_$n.ncu-rep
done
ls -la $OUT
