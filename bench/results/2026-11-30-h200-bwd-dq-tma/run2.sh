#!/usr/bin/env bash
# Second device call (after the staging stores became st.shared.v2 at four base addresses: no spills):
#  1. every default config of tests/gpu/build_bwd_kernels.sh translated by this tree (out/gpu-py):
#     numerics (fixed + random shapes), the planted bugs, the
#     deterministic kernels bit-identical over 10 runs;
#  2. per config, par_ (the parent: float4 reductions), bar_ (TMA additions, the stage's own wait and
#     barrier) and new_ (this tree: the wait folded into the iteration's first __syncthreads) timed
#     against each other by bench/bench_bwd_ab.py (rotating rounds of CUDA graphs, one process).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/dqlib; ARGS=()
for f in out/dqtma/*_*.cu; do ARGS+=(--cu "$(basename "$f" .cu)=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/all --bin out/gpu-py -j 8 > "$OUT/build_all.txt" 2>&1 &
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' -j 8 "${ARGS[@]}" > "$OUT/build_ab.txt" 2>&1; echo "build exit $?" >> "$OUT/build_ab.txt"
wait; cat "$OUT/build_all.txt" "$OUT/build_ab.txt" | grep -E "registers|fail|exit"
timeout 170 python3 tests/gpu/bwd_check.py $(ls out/all/bwd_*.so) $L/bar_*.so --planted $(ls out/all/neg_*.so) --random 6 --repeat 10 \
  > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "numerics|FAIL|planted|x10|exit" "$OUT/bwd_check.txt" | tail -14
S='8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384;8,32,32,2048,2048;2,32,32,8192,8192'
for n in d128_causal d128_none d128_causal_mha d64_causal d64_none_mha d128_window_mha d128_doc; do
  B="$L/par_$n.so $L/new_$n.so"; [ -f "$L/bar_$n.so" ] && B="$B $L/bar_$n.so"
  # shellcheck disable=SC2086
  timeout 100 python3 bench/bench_bwd_ab.py $B --shapes "$S" --csv "$OUT/ab_$n.csv" > "$OUT/ab_$n.txt" 2>&1
  echo "ab exit $?" >> "$OUT/ab_$n.txt"; cat "$OUT/ab_$n.txt"
done
