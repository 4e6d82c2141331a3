#!/usr/bin/env bash
# The Hopper (sm90a) GPU checks of issue 5 in one command, for a lent H100/H200 (TL and CUDA from
# the qattn binaries in BIN_DIR, CUTLASS headers from .cutlass/include):
#   1. build the sm90 kernels of tests/gpu/build_kernels.sh (one block per tile, and `{persistent}`)
#   2. numerics: tests/gpu/verify.py over them (a kernel from deliberately broken TL must fail)
#   3. race check: compute-sanitizer memcheck, racecheck and synccheck on small cases (one of them
#      with more work tiles than SMs, so persistent blocks run several), and 20 repeated runs that
#      must be bit-identical (tests/gpu/sanitize_main.cu)
#   4. benchmark: bench/bench_sm90.py for both grid forms (cuDNN and FA2 in the same process)
#   5. benchmark: bench/bench_gqa_pack.py, GQA packing against one head per tile, cuDNN and FA2
# Usage: tests/gpu/sm90_suite.sh OUT_DIR [BIN_DIR] [--no-bench]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT=$1; BIN=${2:-$ROOT/build}; BENCH=1
[ "${3:-}" = "--no-bench" ] && BENCH=0
mkdir -p "$OUT"
export QATTN_HOME=$ROOT PYTHONUNBUFFERED=1
CUT=$ROOT/.cutlass/include
SM=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
[ "$SM" = 90 ] || { echo "sm90_suite.sh needs a Hopper GPU (compute capability 9.0); this one is $SM" >&2; exit 2; }
K=/tmp/qattn_sm90; rm -rf $K
status=0
echo "== 1. build the sm90 kernels =="
bash "$ROOT/tests/gpu/build_kernels.sh" $K --run-sm 90 --bin "$BIN" --cutlass "$CUT" -j "$(nproc)" --only '^(sm90|neg_sm90)' || status=1
cp $K/ptxas.txt "$OUT/" 2>/dev/null
grep -l "C75[0-9][0-9]" $K/*.log 2>/dev/null | sed 's/^/ptxas serialised wgmma: /' && status=1
[ $status = 0 ] || { echo "kernel build failed: stopping (see $OUT/ptxas.txt)"; exit 1; }
echo "== 2. numerics =="
python3 "$ROOT/tests/gpu/verify.py" $K > "$OUT/verify.txt" 2>&1 || status=1
grep -E "FAIL|passed" "$OUT/verify.txt" | tail -15
echo "== 3. race check =="
nvcc -std=c++17 -I"$ROOT/include" "$ROOT/tests/gpu/sanitize_main.cu" -o /tmp/sanitize_main -ldl || status=1
{
  for lib in sm90_d128_causal sm90_d128_none sm90_mla_causal_lse sm90_d64_none sm90_d256_none sm90p_d256_none sm90pk_d128_causal sm90pk_d256_causal; do
    shapes="2,4,2,77,130"
    grep -q "{persistent}" $K/$lib.tl && shapes="$shapes 2,16,4,600,700"  # 160 tiles > 132 SMs
    for shape in $shapes; do
      for tool in memcheck racecheck synccheck; do
        if timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/sanitize_main $K/$lib.so --shape $shape > /tmp/san.log 2>&1; then
          echo "sanitizer $tool $lib $shape: clean ($(grep -o 'ERROR SUMMARY: [0-9]* errors' /tmp/san.log | head -1))"
        else
          echo "sanitizer $tool $lib $shape: FAILED"; tail -20 /tmp/san.log
        fi
      done
    done
    /tmp/sanitize_main $K/$lib.so --shape 4,32,8,3000,3000 --repeat 20 | tail -1
  done
} 2>&1 | tee "$OUT/race.txt"
grep -q "FAILED\|[1-9][0-9]* not bit-identical" "$OUT/race.txt" && status=1
if [ $BENCH = 1 ]; then
  echo "== 4. benchmark =="
  python3 "$ROOT/bench/bench_sm90.py" $K --out "$OUT" --also 'other_grid=^sm90alt_(d\d+|mla)_(causal|none)(_lse)?\.so$' 2>&1 | tail -8
  echo "== 5. GQA packing: short queries over a long cache =="
  python3 "$ROOT/bench/bench_gqa_pack.py" $K --out "$OUT" 2>&1 | tail -4
fi
exit $status
