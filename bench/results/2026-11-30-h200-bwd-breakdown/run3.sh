#!/usr/bin/env bash
# Third device call (carried out/carry, out/gpu-py, out/exp): GQA's dK, dV added in fp32 by the query
# heads of a group (the generated GQA units, main at a584494) against the MHA form of the same TL with
# dK, dV per query head (bf16, TMA stores; their maps over heads_q and the MHA-only check removed by
# sed: make_exp.sh) summed over each group in torch, no mask and causal (gqa_perhead.py).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
D=bench/results/2026-11-30-h200-bwd-breakdown
bash tests/gpu/build_bwd_kernels.sh out/explib --only '^$' -j 8 --cu a_none=out/exp/gqa_atomic_none.cu --cu p_none=out/exp/gqa_perhead_none.cu \
  --cu a_causal=out/exp/gqa_atomic_causal.cu --cu p_causal=out/exp/gqa_perhead_causal.cu > "$OUT/build3.txt" 2>&1
echo "build exit $?" >> "$OUT/build3.txt"; grep -E "registers|fail|exit" "$OUT/build3.txt"
for m in none causal; do
  timeout 150 python3 $D/gqa_perhead.py out/explib/a_$m.so out/explib/p_$m.so >> "$OUT/perhead.txt" 2>&1; echo "$m exit $?" >> "$OUT/perhead.txt"
done
cat "$OUT/perhead.txt"
