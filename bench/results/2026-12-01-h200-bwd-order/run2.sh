#!/usr/bin/env bash
# Second device call: the planner's heads-first Grid for a causal MHA backward on Hopper (this tree,
# out/gpu-py), against main before it (out/ab/base: bbed48c's stripped qattn and device/).
#  1. numerics: every default config of tests/gpu/build_bwd_kernels.sh translated by this tree (the
#     causal MHA ones now heads first) plus the causal MHA d128 / d64 / d256 configs and a planted bug
#     in a heads-first program (its loop starts a query tile late), tests/gpu/bwd_check.py;
#  2. through the package: the variants (softcap: a causal MHA kernel, now heads first; window,
#     documents: unchanged) with the parent's kernels in the same process (--also base), synced and queued.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
V=(--configs '' --variants softcap,window,document)
JV=$(python3 bench/bench_backward.py --jobs "${V[@]}" 2>/dev/null | tail -1)
for i in $(seq 0 $((JV - 1))); do timeout 200 python3 bench/bench_backward.py --warm $i "${V[@]}" > /dev/null 2>&1 & done
bash tests/gpu/build_bwd_kernels.sh out/all --bin out/gpu-py -j 6 --extra 'bwd_d128_causal_mha|--preset llama2-7b' \
  --extra 'bwd_d64_causal_mha|--preset llama3.2-1b --heads 32,32' --extra 'bwd_d256_causal_mha|--preset gemma-7b' \
  --extra 'neg_bwd_mha_late_first_tile|--preset llama2-7b|s/^for i = max(0, \(.*\)): /for i = max(0, \1 + 1): /' > "$OUT/build.txt" 2>&1
echo "build exit $? at $SECONDS s" >> "$OUT/build.txt"
wait
grep -E "fail|exit" "$OUT/build.txt"; grep -l "^Grid head" out/all/*.tl > "$OUT/heads_first.txt"; cat "$OUT/heads_first.txt"
timeout 150 python3 tests/gpu/bwd_check.py $(ls out/all/bwd_*.so) --planted $(ls out/all/neg_*.so) --random 3 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $? at $SECONDS s" >> "$OUT/bwd_check.txt"; grep -E "numerics|FAIL|planted|exit" "$OUT/bwd_check.txt" | tail -8
timeout 240 python3 bench/bench_backward.py "$OUT/variants.csv" "${V[@]}" --also base=out/ab/base/device:out/ab/base/qattn > "$OUT/bench.txt" 2>&1
echo "variants exit $? at $SECONDS s" >> "$OUT/bench.txt"; grep -E "causal=True|fwd / bwd|speed vs|exit" "$OUT/bench.txt"
