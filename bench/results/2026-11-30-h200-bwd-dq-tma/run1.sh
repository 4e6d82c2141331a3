#!/usr/bin/env bash
# First device call: dQ added by TMA reductions (this tree) against the threads' float4 reductions
# (the parent), kernel to kernel in one process. make_ab.sh made out/dqtma/{par,new}_NAME.cu on the
# CPU machine; out/gpu-py carries this tree's stripped qattn / qattn_translate.
#  1. every default config of tests/gpu/build_bwd_kernels.sh translated by this tree: numerics (fixed +
#     random shapes), the planted bugs, the deterministic kernels bit-identical over 10 runs;
#  2. the A/B pairs: numerics on the fixed shapes, then TFLOPS of each pair (par first, then new).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/dqlib; ARGS=()
for f in out/dqtma/par_*.cu out/dqtma/new_*.cu; do ARGS+=(--cu "$(basename "$f" .cu)=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/all --bin out/gpu-py -j 8 > "$OUT/build_all.txt" 2>&1 &
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' -j 8 "${ARGS[@]}" > "$OUT/build_ab.txt" 2>&1; echo "build exit $?" >> "$OUT/build_ab.txt"
wait; cat "$OUT/build_all.txt" "$OUT/build_ab.txt" | grep -E "registers|fail|exit"
timeout 170 python3 tests/gpu/bwd_check.py $(ls out/all/bwd_*.so) $L/new_*.so --planted $(ls out/all/neg_*.so) --random 6 --repeat 10 \
  > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "numerics|FAIL|planted|x10|exit" "$OUT/bwd_check.txt" | tail -14
B=""; for n in d128_causal d128_none d128_causal_mha d64_causal d64_none_mha d128_window_mha d128_doc; do B="$B $L/par_$n.so $L/new_$n.so"; done
# shellcheck disable=SC2086
timeout 240 python3 tests/gpu/bwd_check.py $B --bench --shapes '1,4,4,300,300' \
  --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384;8,32,32,2048,2048;2,32,32,8192,8192' \
  --csv "$OUT/kernels.csv" > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "TFLOPS|exit" "$OUT/bench.txt" | head -80
