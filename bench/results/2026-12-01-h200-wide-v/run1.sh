#!/usr/bin/env bash
# One device call (carried: out/carry, out/gpu-py, out/widev from make.sh, .whl): head_dim_v > head_dim_qk
# on the GPU. The Python tests through the package's own compile path (JIT through out/gpu-py/qattn;
# forward and backward in two processes, started first). Forward kernels: tests/gpu/build_kernels.sh's
# widev configs (sm80 as PTX, sm90) verified by qattn.verify against fp64. Backward:
# build_bwd_kernels.sh's widev / narrowv configs and make.sh's units, bwd_check.py (FlashAttention's
# rule against fp32, fixed and random shapes); then, with the GPU otherwise idle, the transposed form
# against the natural form on mma.sync, kernel to kernel.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
source tests/gpu/pytest_env.sh
timeout 450 python3 -m pytest -q tests/python/test_gpu.py -k "wider" > "$OUT/pytest_fwd.txt" 2>&1 &
timeout 450 python3 -m pytest -q tests/python/test_gpu_training.py \
  -k "backward_matches_autograd and (shape9 or shape10 or shape11 or shape12)" > "$OUT/pytest_bwd.txt" 2>&1 &
{
bash tests/gpu/build_kernels.sh out/wk --run-sm 90 --bin out/gpu-py --only 'widev' -j 12
echo "fwd build exit $? at $SECONDS s"
timeout 120 python3 tests/gpu/verify.py out/wk --only widev
echo "fwd verify exit $? at $SECONDS s"
A=(); for f in out/widev/*.cu; do A+=(--cu "$(basename "$f" .cu)=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/wbk --bin out/gpu-py --only 'widev|narrowv' -j 12 "${A[@]}"
echo "bwd build exit $? at $SECONDS s"
timeout 150 python3 tests/gpu/bwd_check.py out/wbk/bwd_widev_64_128_causal.so out/wbk/bwd_widev_64_128_none_mha.so \
  out/wbk/bwd_widev_128_256_causal.so out/wbk/bwd_narrowv_128_64_causal.so out/wbk/a100_widev_64_128_causal.so \
  out/wbk/a100_widev_128_256_none.so --random 16
echo "bwd check exit $? at $SECONDS s"
wait
echo "pytest done at $SECONDS s"
for p in "widev_64_128_causal|8,32,8,2048,2048;2,32,8,8192,8192" "narrowv_128_64_causal|8,32,8,2048,2048;2,32,8,8192,8192"; do
  n=${p%%|*}; timeout 60 python3 bench/bench_bwd_ab.py out/wbk/nat_$n.so out/wbk/bwd_$n.so --shapes "${p#*|}" --rounds 7
  echo "ab $n exit $? at $SECONDS s"
done
} > "$OUT/kernels.txt" 2>&1
grep -E "exit|FAIL|fail|PASS|numerics|done|us \(" "$OUT/kernels.txt" | tail -40
tail -3 "$OUT/pytest_fwd.txt" "$OUT/pytest_bwd.txt"
