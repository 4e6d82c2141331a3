#!/usr/bin/env bash
# d256 backward on wgmma (natural form) against the mma.sync natural form it replaces, same process:
# build (scripts/build.sh: the TL of scripts/make_tl.sh, translated and compiled here), numerics of
# every variant library (fixed + random shapes, a planted bug), the deterministic ones bit-identical
# over 10 runs, then TFLOPS against cuDNN / FA2 (SDPA backends) on the bench shapes.
# Carried: out/carry (CUTLASS), out/gpu-py (qattn_translate), out/d256w/tl.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
D=bench/results/2026-11-30-h200-bwd-d256-wgmma
mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
export LD_LIBRARY_PATH=$PWD/out/gpu-py/lib PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
bash $D/scripts/build.sh > "$OUT/build.txt" 2>&1; cat "$OUT/build.txt"
L=out/d256w
timeout 200 python3 tests/gpu/bwd_check.py $L/[wm]_*.so --planted $L/neg_noscale.so --random 6 \
  --repeat 10 > "$OUT/bwd_check.txt" 2>&1
echo "bwd_check exit $?" >> "$OUT/bwd_check.txt"
grep -E "numerics|FAIL|planted|x10|exit" "$OUT/bwd_check.txt" | tail -30
timeout 200 python3 tests/gpu/bwd_check.py $L/[wm]_causal.so $L/[wm]_none.so $L/[wm]_gqa.so $L/[wm]_softcap.so --bench \
  --shapes '1,4,4,300,300' --bench-shapes '4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384;4,32,8,4096,4096' \
  --csv "$OUT/results_bwd.csv" > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"
grep -E "TFLOPS|exit" "$OUT/bench.txt"
