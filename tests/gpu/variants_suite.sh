#!/usr/bin/env bash
# Issue 8 on a GPU, in one command: build one kernel per attention variant through the whole
# pipeline (`qattn generate --no-verify`, sm80 path, native code for this GPU), check each against
# an independent torch reference (tests/gpu/verify_variants.py), then time sliding window and
# softcap against FlexAttention with the same functions (bench/bench_variants.py).
# Usage: tests/gpu/variants_suite.sh OUT_DIR [BIN_DIR] [--no-bench]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT=$1; BIN=${2:-$ROOT/build}; BENCH=1
[ "${3:-}" = "--no-bench" ] && BENCH=0
mkdir -p "$OUT"
export QATTN_HOME=$ROOT PYTHONUNBUFFERED=1 QATTN_CUTLASS_INCLUDE=${QATTN_CUTLASS_INCLUDE:-$ROOT/.cutlass/include}
W=/tmp/qattn_variants; rm -rf $W; mkdir -p $W
status=0
gen() {  # NAME FLAGS...
  local name=$1; shift
  "$BIN/qattn" generate --preset llama3-8b --gpu a100 "$@" --out $W/$name --no-verify > $W/$name.log 2>&1 ||
    { echo "build $name FAILED"; tail -5 $W/$name.log; return 1; }
}
echo "== 1. build variant kernels =="
t0=$(date +%s)
gen softcap --softcap 30 &
gen alibi --alibi &
gen prefix_lm --prefix-lm 100 &
gen document --document &
gen relative_bias --relative-bias 32 &
gen doc_softcap --document --softcap 50 --alibi &
gen custom --mask-mod 'kv_idx <= q_idx + seqlen_k - seqlen_q and (kv_idx >= q_idx + seqlen_k - seqlen_q - 64 or kv_idx % 256 < 16)' &
if [ $BENCH = 1 ]; then
  for w in 256 1024 4096; do gen window_$w --window $w,0 & done
fi
wait
echo "built in $(( $(date +%s) - t0 )) s: $(ls -d $W/*/ | wc -l) kernels"
# the custom mask transcribed to torch for the reference (b, h, q, k are index grids; off = sk - sq)
[ -d $W/custom ] && echo '{"keep": "(k <= q + off) & ((k >= q + off - 64) | (k % 256 < 16))"}' > $W/custom/variants.json
grep -h "registers\|spill" $W/*/build.log 2>/dev/null | sort | uniq -c | head -5 > "$OUT/ptxas_variants.txt"
echo "== 2. numerics =="
python3 "$ROOT/tests/gpu/verify_variants.py" $W > "$OUT/verify_variants.log" 2>&1 || status=1
grep -E "FAIL|checks pass" "$OUT/verify_variants.log" | tail -12
for d in $W/document $W/prefix_lm; do [ -f $d/kernel.cu ] && cp $d/kernel.cu "$OUT/$(basename $d)_kernel.cu"; done
if [ $BENCH = 1 ]; then
  echo "== 3. bench vs FlexAttention =="
  python3 "$ROOT/bench/bench_variants.py" $W "$OUT/variants.csv" 2>&1 | tee "$OUT/bench_variants.log" | grep -v Warning || status=1
fi
exit $status
