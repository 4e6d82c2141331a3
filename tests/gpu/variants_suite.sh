#!/usr/bin/env bash
# Issue 8 on a GPU, in one command: build one kernel per attention variant through the whole
# pipeline (`qattn generate --no-verify`) for the Hopper path (--gpu h100: TMA + wgmma, the sm90
# translation), the sm80 path (--gpu a100: cp.async + mma.sync, native code for this GPU) and, for
# four of them, the fp8 path (--gpu l40s --dtype fp8_e4m3: the sm89 lowering), check
# each against an independent torch reference (tests/gpu/verify_variants.py), then time sliding
# window and softcap against FlexAttention with the same functions, the sm90 kernels as `qattn` and
# the sm80 ones as `qattn_sm80` in the same process (bench/bench_variants.py).
# Usage: tests/gpu/variants_suite.sh OUT_DIR [BIN_DIR] [--no-bench]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT=$1; BIN=${2:-$ROOT/build}; BENCH=1
[ "${3:-}" = "--no-bench" ] && BENCH=0
mkdir -p "$OUT"
export QATTN_HOME=$ROOT PYTHONUNBUFFERED=1 QATTN_CUTLASS_INCLUDE=${QATTN_CUTLASS_INCLUDE:-$ROOT/.cutlass/include}
W=/tmp/qattn_variants; rm -rf $W; mkdir -p $W/sm90 $W/sm80 $W/sm89fp8
status=0
gen() {  # SET GPU NAME FLAGS...
  local set=$1 gpu=$2 name=$3; shift 3
  "$BIN/qattn" generate --preset llama3-8b --gpu "$gpu" "$@" --out $W/$set/$name --no-verify > $W/$set/$name.log 2>&1 ||
    { echo "build $set/$name FAILED"; tail -5 $W/$set/$name.log; return 1; }
}
echo "== 1. build variant kernels (sm90 and sm80 paths) =="
t0=$(date +%s)
for pair in sm90:h100 sm80:a100; do
  set=${pair%%:*}; gpu=${pair#*:}
  gen $set $gpu softcap --softcap 30 &
  gen $set $gpu alibi --alibi &
  gen $set $gpu prefix_lm --prefix-lm 100 &
  gen $set $gpu document --document &
  gen $set $gpu relative_bias --relative-bias 32 &
  gen $set $gpu doc_softcap --document --softcap 50 --alibi &
  gen $set $gpu custom --mask-mod 'kv_idx <= q_idx + seqlen_k - seqlen_q and (kv_idx >= q_idx + seqlen_k - seqlen_q - 64 or kv_idx % 256 < 16)' &
  for w in 256 1024 4096; do gen $set $gpu window_$w --window $w,0 & done
done
# the fp8 path (sm89 lowering, e4m3 inputs with descale factors, bf16 out; PTX JIT-free native code
# for this GPU): numerics only
gen sm89fp8 l40s softcap --dtype fp8_e4m3 --softcap 30 &
gen sm89fp8 l40s doc_softcap --dtype fp8_e4m3 --document --softcap 50 --alibi &
gen sm89fp8 l40s prefix_lm --dtype fp8_e4m3 --prefix-lm 100 &
gen sm89fp8 l40s relative_bias --dtype fp8_e4m3 --relative-bias 32 &
wait
echo "built in $(( $(date +%s) - t0 )) s: $(ls -d $W/*/*/ | wc -l) kernels"
for set in sm90 sm80 sm89fp8; do
  # the custom mask transcribed to torch for the reference (b, h, q, k are index grids; off = sk - sq)
  [ -d $W/$set/custom ] && echo '{"keep": "(k <= q + off) & ((k >= q + off - 64) | (k % 256 < 16))"}' > $W/$set/custom/variants.json
  grep -h "registers\|spill" $W/$set/*/build.log 2>/dev/null | sort | uniq -c | head -8 > "$OUT/ptxas_variants_$set.txt"
done
echo "== 2. numerics =="
for set in sm90 sm80 sm89fp8; do
  python3 "$ROOT/tests/gpu/verify_variants.py" $W/$set > "$OUT/verify_variants_$set.log" 2>&1 || status=1
  echo "$set: $(grep -E "checks pass" "$OUT/verify_variants_$set.log" | tail -1)"
  grep -E "FAIL" "$OUT/verify_variants_$set.log" | head -12
done
for d in $W/sm90/document $W/sm90/softcap; do [ -f $d/kernel.cu ] && cp $d/kernel.cu "$OUT/sm90_$(basename $d)_kernel.cu"; done
if [ $BENCH = 1 ]; then
  echo "== 3. bench vs FlexAttention (qattn = sm90 path, qattn_sm80 = sm80 path) =="
  python3 "$ROOT/bench/bench_variants.py" $W/sm90 "$OUT/variants.csv" --also sm80=$W/sm80 2>&1 |
    tee "$OUT/bench_variants.log" | grep -v Warning || status=1
fi
exit $status
