#!/usr/bin/env bash
# bound experiments on the d128 sm90 backward (timing only), and an ncu report of the main kernel
set -uo pipefail
ROOT=$PWD; K=/tmp/kk; rm -rf $K; mkdir -p $K
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
args=(); for f in out/ab_var2/v*_?.cu; do n=$(basename $f .cu); args+=(--cu "$n=$ROOT/$f"); done
bash tests/gpu/build_bwd_kernels.sh $K --bin out/gpu-py --only '^$' -j 16 "${args[@]}" 2>&1 | tail -12
python3 tests/gpu/bwd_check.py $K/v0_c.so $K/v0_n.so --shapes '1,2,2,77,130;2,4,2,300,555' 2>&1 | tail -3
python3 tests/gpu/bwd_check.py $K/v0_c.so $K/vnodq_c.so $K/vnold_c.so $K/vnoexp_c.so $K/vnone_c.so $K/v0_n.so $K/vnodq_n.so $K/vnold_n.so $K/vnoexp_n.so $K/vnone_n.so \
  --shapes '1,2,2,77,130' --bench --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192' --csv $OUT/ab.csv 2>&1 | grep -v ": ok\|FAIL\|exceed" | tail -30
timeout 200 ncu --clock-control none -k 'regex:sm90$' --launch-skip 5 --launch-count 1 --set full --import-source yes -o $OUT/v0_n \
  python3 tests/gpu/bwd_check.py $K/v0_n.so --shapes '1,2,2,77,130' --bench --bench-shapes '4,16,16,4096,4096' > $OUT/ncu_log.txt 2>&1; echo ncu rc $?
ncu -i $OUT/v0_n.ncu-rep --page details > $OUT/v0_n_details.txt 2>&1
ncu -i $OUT/v0_n.ncu-rep --page source --csv --print-source sass > $OUT/v0_n_sass.csv 2>&1; ls -la $OUT
