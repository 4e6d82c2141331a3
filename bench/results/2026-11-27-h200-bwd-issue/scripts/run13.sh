#!/usr/bin/env bash
# the planner's backward with the masks after `St - LSE^T` (new_*: one FFMA an element) against the
# parent planner's order (par_*: masks on St), same translator and runtime, same process
set -uo pipefail
ROOT=$PWD; K=/tmp/kk13; rm -rf $K; mkdir -p $K
[ -d .cutlass/include/cute ] || tar -xJf out/carry/cutlass.tar.xz
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
A=out/ab_var2; P1='--preset llama3.2-1b --heads 16,16'
bash tests/gpu/build_bwd_kernels.sh $K --bin out/gpu-py --only '^new_' -j 16 \
  --tl par_c=$A/pc/code.tl --tl par_n=$A/pn/code.tl --tl par_d64c=$A/pd64c/code.tl --tl par_d64n=$A/pd64n/code.tl --tl par_sc=$A/par_sc.tl \
  --extra 'new_c|--preset llama2-7b' --extra 'new_n|--preset llama2-7b --mask none' \
  --extra "new_d64c|$P1" --extra "new_d64n|$P1 --mask none" --extra 'new_sc|--preset llama3-8b --softcap 30' 2>&1 | tail -10
python3 tests/gpu/bwd_check.py $K/new_*.so --random 4 2>&1 | grep -v ": ok " | tail -3
libs=""; for n in c n d64c d64n; do libs="$libs $K/par_$n.so $K/new_$n.so"; done
python3 tests/gpu/bwd_check.py $libs --shapes '1,2,2,77,130' --bench --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192' --csv $OUT/ab_ffma.csv 2>&1 | grep -v ": ok\|exceed" | tail -17
python3 tests/gpu/bwd_check.py $K/par_sc.so $K/new_sc.so --shapes '1,4,2,77,130' --bench --bench-shapes '4,32,8,4096,4096;2,32,8,8192,8192' --csv $OUT/ab_ffma_softcap.csv 2>&1 | grep -v ": ok\|exceed" | tail -5
