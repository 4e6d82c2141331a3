#!/usr/bin/env bash
# Second call: the lowering's TMA ring (this tree's qattn_translate in out/gpu-py). Every default config
# of tests/gpu/build_bwd_kernels.sh translated by it: numerics (fixed + random shapes), the planted bugs,
# the deterministic kernels bit-identical over 10 runs. Then, kernel to kernel in one process, for d128
# causal / none and d64 causal: par_ (main's translation, cp.async ring), tma_ (run1's hand-made ring,
# no barrier before the dS^T store), new_ (this tree's translation) and nb_ (new_ with that barrier
# split into named barriers between the warpgroups, make_nb.py).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/tmalib; ARGS=()
for n in d128_causal d128_none d64_causal; do for v in par tma new nb; do ARGS+=(--cu "${v}_$n=out/tma/${v}_$n.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh out/all --bin out/gpu-py -j 8 > "$OUT/build_all.txt" 2>&1 &
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' -j 8 "${ARGS[@]}" > "$OUT/build_ab.txt" 2>&1; echo "build exit $?" >> "$OUT/build_ab.txt"
wait; cat "$OUT/build_all.txt" "$OUT/build_ab.txt" | grep -E "registers|fail|exit"
grep -c "mbar_wait(ring_full" out/all/bwd_d128_causal.cu out/all/bwd_d128_causal_det.cu out/all/bwd_mla_causal.cu
timeout 200 python3 tests/gpu/bwd_check.py $(ls out/all/bwd_*.so) $L/nb_*.so --planted $(ls out/all/neg_*.so) --random 6 --repeat 10 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "numerics|FAIL|planted|x10|exit" "$OUT/bwd_check.txt" | tail -12
timeout 240 python3 tests/gpu/bwd_check.py $L/{par,tma,new,nb}_d128_causal.so $L/{par,tma,new,nb}_d128_none.so $L/{par,tma,new,nb}_d64_causal.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels.csv" > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"; grep -E "TFLOPS|exit" "$OUT/bench.txt"
