#!/usr/bin/env bash
# the natural form (mma.sync: MLA, d256, --bwd-form natural) with D by a Phase (phn_*) against the parent (parn_*)
set -uo pipefail
ROOT=$PWD; K=/tmp/kn; rm -rf $K; mkdir -p $K
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
args=()
for n in nat_d128_causal mla_causal d256_causal nat_d64_causal; do args+=(--cu "parn_$n=$ROOT/out/ab_var/parn_$n.cu" --tl "phn_$n=$ROOT/out/ab_var/phn_$n.tl"); done
bash tests/gpu/build_bwd_kernels.sh $K --bin out/gpu-py --only '^(phn_|parn_)' -j 16 "${args[@]}" 2>&1 | tail -10
python3 tests/gpu/bwd_check.py $K/phn_*.so --random 3 2>&1 | grep -v ": ok " | tail -5
libs=(); for n in nat_d128_causal mla_causal d256_causal nat_d64_causal; do libs+=($K/parn_$n.so $K/phn_$n.so); done
python3 tests/gpu/bwd_check.py "${libs[@]}" --shapes '1,2,2,77,130' --bench --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192' --csv $OUT/ab_natural.csv 2>&1 | tail -1
