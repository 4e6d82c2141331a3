#!/usr/bin/env bash
# Third device call (the tree as committed: the stage's addresses from qattn::tma_stage_offset):
#  1. every default config of tests/gpu/build_bwd_kernels.sh translated by this tree (out/gpu-py):
#     numerics (fixed + random shapes), the planted bugs, the deterministic kernels bit-identical over
#     10 runs; then the package's training tests (tests/python/test_gpu_training.py, with the refusal
#     of a dq the TMA cannot address);
#  2. per config, par_ (the parent: float4 reductions), new_ (this tree) and bar_ (new_ with the stage's
#     own wait and barrier instead of the wait folded into the iteration's first __syncthreads) timed
#     against each other by bench/bench_bwd_ab.py (rotating rounds of CUDA graphs, one process each);
#     ab.txt / ab.csv.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
L=out/dqlib; ARGS=()
for f in out/dqtma/*_*.cu; do ARGS+=(--cu "$(basename "$f" .cu)=$f"); done
bash tests/gpu/build_bwd_kernels.sh out/all --bin out/gpu-py -j 8 > "$OUT/build.txt" 2>&1 &
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' -j 8 "${ARGS[@]}" > "$OUT/build_ab.txt" 2>&1; echo "build exit $?" >> "$OUT/build_ab.txt"
wait; cat "$OUT/build_ab.txt" >> "$OUT/build.txt"; rm "$OUT/build_ab.txt"; grep -E "registers|fail|exit" "$OUT/build.txt"
timeout 170 python3 tests/gpu/bwd_check.py $(ls out/all/bwd_*.so) $L/bar_*.so --planted $(ls out/all/neg_*.so) --random 6 --repeat 10 \
  > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"; grep -E "numerics|FAIL|planted|x10|exit" "$OUT/bwd_check.txt" | tail -14
. tests/gpu/pytest_env.sh
timeout 200 python3 -m pytest tests/python/test_gpu_training.py -q -p no:cacheprovider > "$OUT/pytest_training.txt" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_training.txt"; tail -3 "$OUT/pytest_training.txt"
S='8,32,8,2048,2048;2,32,8,8192,8192;1,32,8,16384,16384;8,32,32,2048,2048;2,32,32,8192,8192'
: > "$OUT/ab.txt"
for n in d128_causal d128_none d128_causal_mha d64_causal d64_none_mha d128_window_mha d128_doc; do
  # shellcheck disable=SC2086
  timeout 100 python3 bench/bench_bwd_ab.py $L/par_$n.so $L/new_$n.so $L/bar_$n.so --shapes "$S" --csv "$OUT/ab_one.csv" >> "$OUT/ab.txt" 2>&1
  echo "ab $n exit $?" >> "$OUT/ab.txt"
  if [ -f "$OUT/ab.csv" ]; then tail -n +2 "$OUT/ab_one.csv" >> "$OUT/ab.csv"; else cp "$OUT/ab_one.csv" "$OUT/ab.csv"; fi
done
rm -f "$OUT/ab_one.csv"; grep -v "^NVIDIA\|skipped" "$OUT/ab.txt"
