#!/usr/bin/env bash
# D by a Phase, loaded into registers where it is used, against the parent (par_*); numerics on the A/B kernels
set -uo pipefail
ROOT=$PWD; K=/tmp/kk; rm -rf $K; mkdir -p $K
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
args=()
for n in d128_causal d128_none d64_causal d64_none; do args+=(--cu "par_$n=$ROOT/out/ab_var/par_$n.cu"); done
bash tests/gpu/build_bwd_kernels.sh $K --bin out/gpu-py --only '^(ab_|par_)' -j 16 "${args[@]}" \
  --extra 'ab_d128_causal|--preset llama2-7b' --extra 'ab_d128_none|--preset llama2-7b --mask none' \
  --extra 'ab_d64_causal|--preset llama3.2-1b --heads 16,16' --extra 'ab_d64_none|--preset llama3.2-1b --heads 16,16 --mask none' \
  --extra 'ab_d64_gqa_causal|--preset llama3.2-1b' 2>&1 | tail -30
python3 tests/gpu/bwd_check.py $K/ab_*.so --random 4 2>&1 | grep -v ": ok " | tail -5
python3 tests/gpu/bwd_check.py $K/par_d128_causal.so $K/ab_d128_causal.so $K/par_d128_none.so $K/ab_d128_none.so $K/par_d64_causal.so $K/ab_d64_causal.so $K/par_d64_none.so $K/ab_d64_none.so \
  --shapes '1,2,2,77,130' --bench --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384' --csv $OUT/ab.csv 2>&1 | tail -1
