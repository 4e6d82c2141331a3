#!/usr/bin/env bash
# One device call: where a Hopper backward block spends its time (main at 24cac2e's translation, the
# A/B units of ../2026-11-30-h200-bwd-dq-tma: out/dqtma/new_*.cu), stamped by stamp.py.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
D=bench/results/2026-11-30-h200-bwd-timeline; mkdir -p out/tl; ARGS=()
for n in d128_none d128_causal_mha d64_causal; do
  python3 $D/stamp.py out/dqtma/new_$n.cu out/tl/st_$n.cu && cp out/dqtma/new_$n.flags out/tl/st_$n.flags
  ARGS+=(--cu "st_$n=out/tl/st_$n.cu" --cu "new_$n=out/dqtma/new_$n.cu")
done
bash tests/gpu/build_bwd_kernels.sh out/tllib --only '^$' -j 8 "${ARGS[@]}" > "$OUT/build.txt" 2>&1; echo "build exit $?" >> "$OUT/build.txt"
grep -E "registers|fail|exit" "$OUT/build.txt"
for n in d128_none d128_causal_mha d64_causal; do
  timeout 60 python3 $D/probe.py out/tllib/new_$n.so out/tllib/st_$n.so >> "$OUT/probe.txt" 2>&1; echo "probe $n exit $?" >> "$OUT/probe.txt"
done
cat "$OUT/probe.txt"
