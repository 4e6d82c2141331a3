#!/usr/bin/env bash
# Issue 17's sweep again after the wgmma-descriptor change: the sm90 forward kernels of HEAD's
# translator and runtime (qattn) against the parent of the issue (6539093, qattn_old), cuDNN and FA2,
# one process (bench/bench_sm90.py, paired rounds); numerics of the new kernels first.
set -uo pipefail
ROOT=$PWD
[ -d .cutlass/include/cute ] || tar -xJf out/carry/cutlass.tar.xz
rm -rf out/old6539 && tar -xJf out/carry/old.tar.xz -C out/
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib QATTN_HOME=$ROOT PYTHONUNBUFFERED=1
K=$ROOT/out/kir; rm -rf $K $K.old
SEL='^sm90_(d64|d128|d256|mla)_(causal|none)(_lse)?$'
bash tests/gpu/build_kernels.sh $K --run-sm 90 --bin out/gpu-py --cutlass .cutlass/include -j 9 --only "$SEL" > $OUT/build_new.txt 2>&1 &
bash tests/gpu/build_kernels.sh $K.old --run-sm 90 --bin out/old6539/bin --device out/old6539/device --cutlass .cutlass/include -j 9 --only "$SEL" > $OUT/build_old.txt 2>&1 &
wait
for f in $K.old/*.so; do cp $f $K/old_$(basename $f); done
cp $K/ptxas.txt $OUT/ptxas_new.txt; cp $K.old/ptxas.txt $OUT/ptxas_old.txt
grep -v ": ok" $OUT/build_new.txt $OUT/build_old.txt | head -8
echo "built in $SECONDS s"
python3 tests/gpu/verify.py $K --only '^sm90_' > $OUT/verify.txt 2>&1; grep -E "FAIL|passed" $OUT/verify.txt | tail -4
python3 bench/bench_sm90.py $K --out $OUT --also 'old=^old_sm90_(d\d+|mla)_(causal|none)(_lse)?\.so$' > $OUT/bench_sweep.log 2>&1
tail -8 $OUT/bench_sweep.log
echo "done in $SECONDS s"
