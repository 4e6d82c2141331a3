#!/usr/bin/env bash
# Issue 17 (the kernel IR and the composing sm90 emitter) on a lent H100/H200, in parts that each
# fit one device command:
#   part 1  build every kernel of tests/gpu/build_kernels.sh with the new translator (BIN_DIR: the
#           sm90 kernels, the TL-edit kernels and the mma.sync ones, whose IR-driven shared-memory
#           plan and ABI checks are new too) and the planner kernels with the previous one
#           (OLD_DIR/bin + OLD_DIR/device: the parent commit's qattn, qattn_translate and device
#           runtime) as old_*.so; numerics of all new ones (tests/gpu/verify.py; neg_* must fail)
#   sweep   the 84-row sweep with qattn (new) and qattn_old in one process with cuDNN and FA2
#           (bench/bench_sm90.py); then `qattn generate` end to end on the GPU (the pipeline's GPU
#           step: python -m qattn.verify and qattn.timing)
#   (part 1 then sweep on one warm machine; `all` runs both)
#   part 2  the TL-edit schedule variants timed against the shipped TL (bench_sm90.py --also);
#           compute-sanitizer (memcheck, racecheck, synccheck) and 20 bit-identical repeats; the
#           variant kernels (qattn generate) old and new, verified and timed against FlexAttention
# Usage: tests/gpu/kir_suite.sh 1|sweep|all|2 OUT_DIR BIN_DIR OLD_DIR [PREBUILT_DIR]
# ($QATTN_KIR_ONLY: a regex of the kernels part 1 builds with the new translator)
# PREBUILT_DIR: kernels built elsewhere with the same translator, copied in before the numerics (the
# mma.sync set builds on any machine with nvcc: build_kernels.sh DIR --run-sm 90 --only
# '^(sm80|sm75|sm89|neg_sm80)'), so the GPU's time goes to the sm90 builds.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PART=$1; OUT=$2; BIN=$3; OLD=$4; PREBUILT=${5:-}
mkdir -p "$OUT"
export QATTN_HOME=$ROOT PYTHONUNBUFFERED=1
CUT=$ROOT/.cutlass/include
K=$ROOT/out/kir   # kept between the two parts while the machine stays warm (git-ignored)
status=0
if [ "$PART" = 1 ] || [ "$PART" = all ]; then
  rm -rf "$K" "$K.old"
  echo "== 1. build: new translator (every kernel), and the parent commit's for the old kernels == ($SECONDS s)"
  only='^(sm|neg_)'; [ -n "$PREBUILT" ] && only='^(sm90|neg_sm90)'
  only=${QATTN_KIR_ONLY:-$only}  # e.g. '^(sm90|neg_sm90)': the Hopper kernels alone
  bash "$ROOT/tests/gpu/build_kernels.sh" "$K" --run-sm 90 --bin "$BIN" --cutlass "$CUT" -j 12 --only "$only" > "$OUT/build_new.txt" 2>&1 || status=1 &
  bash "$ROOT/tests/gpu/build_kernels.sh" "$K.old" --run-sm 90 --bin "$OLD/bin" --device "$OLD/device" --cutlass "$CUT" -j 6 \
    --only '^sm90_(d64|d128|d256|mla)_(causal|none)(_lse)?$' > "$OUT/build_old.txt" 2>&1 || status=1 &
  wait
  for f in "$K.old"/*.so; do cp "$f" "$K/old_$(basename "$f")"; done
  if [ -n "$PREBUILT" ]; then cp "$PREBUILT"/*.so "$PREBUILT"/*.tl "$K"/ && cat "$PREBUILT/ptxas.txt" >> "$K/ptxas.txt"; fi
  cp "$K/ptxas.txt" "$OUT/ptxas_new.txt"; cp "$K.old/ptxas.txt" "$OUT/ptxas_old.txt"
  grep -v ": ok" "$OUT/build_new.txt" "$OUT/build_old.txt" | head -20
  grep -l "C75[0-9][0-9]" "$K"/*.log 2>/dev/null | sed 's/^/ptxas serialised wgmma: /'
  echo "== 2. numerics (every new kernel, TL edits, mma.sync; neg_* must fail) == ($SECONDS s)"
  python3 "$ROOT/tests/gpu/verify.py" "$K" --only '^(sm|neg_)' > "$OUT/verify.txt" 2>&1 || status=1
  grep -E "FAIL|passed" "$OUT/verify.txt" | tail -12
  echo "part 1 done in $SECONDS s"
  [ "$PART" = 1 ] && exit $status
fi
if [ "$PART" = sweep ] || [ "$PART" = all ]; then
  echo "== 3. the sweep: new emitter (qattn) vs the parent's kernels (qattn_old), cuDNN, FA2 == ($SECONDS s)"
  python3 "$ROOT/bench/bench_sm90.py" "$K" --out "$OUT" --also 'old=^old_sm90_(d\d+|mla)_(causal|none)(_lse)?\.so$' \
    > "$OUT/bench_sweep.log" 2>&1 || status=1
  tail -7 "$OUT/bench_sweep.log"
  echo "== 4. qattn generate end to end on this GPU (the pipeline's GPU step) == ($SECONDS s)"
  QATTN_CUTLASS_INCLUDE=$CUT QATTN_CACHE_DIR=/tmp/qattn_e2e_cache "$BIN/qattn" generate --preset llama3-8b --gpu h100 \
    --out /tmp/qattn_e2e > "$OUT/generate_e2e.log" 2>&1 || status=1
  tail -12 "$OUT/generate_e2e.log"
  echo "sweep done in $SECONDS s"
  exit $status
fi

if [ ! -f "$K/sm90_d128_none.so" ]; then  # a fresh machine: the new kernels again (part 1's step 1)
  bash "$ROOT/tests/gpu/build_kernels.sh" "$K" --run-sm 90 --bin "$BIN" --cutlass "$CUT" -j 16 --only '^(sm90|neg_sm90)' \
    > "$OUT/build_new.txt" 2>&1 || status=1
fi
echo "== 4. TL-edit schedules vs the shipped TL, d128 == ($SECONDS s)"
python3 "$ROOT/bench/bench_sm90.py" "$K" --out "$OUT/tl_edits" --configs mha_d128,gqa_64_8 --seqlens 1024,2048,4096,8192,16384 \
  --also 'fa3order=^sm90tl_fa3order_' --also 'pvnext=^sm90tl_pvnext_' --also 'syncstore=^sm90tl_syncstore_' \
  --also 'nooverlap=^sm90tl_nooverlap_' --also 'reorder=^sm90tl_reorder_' > "$OUT/bench_tl_edits.log" 2>&1 || status=1
tail -9 "$OUT/bench_tl_edits.log"
echo "== 5. race check == ($SECONDS s)"
nvcc -std=c++17 -I"$ROOT/include" "$ROOT/tests/gpu/sanitize_main.cu" -o /tmp/sanitize_main -ldl || status=1
{
  for lib in sm90_d128_causal sm90_d128_none_lse sm90_mla_causal_lse sm90_d64_none sm90_d256_none sm90p_d256_none sm90pk_d128_causal \
             sm90tl_pvnext_d128_causal; do
    shapes="2,4,2,77,130"
    grep -q "{persistent}" "$K/$lib.tl" && shapes="$shapes 2,16,4,600,700"  # 160 tiles > 132 SMs
    for shape in $shapes; do
      for tool in memcheck racecheck synccheck; do
        if timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/sanitize_main "$K/$lib.so" --shape $shape > /tmp/san.log 2>&1; then
          echo "sanitizer $tool $lib $shape: clean ($(grep -o 'ERROR SUMMARY: [0-9]* errors' /tmp/san.log | head -1))"
        else
          echo "sanitizer $tool $lib $shape: FAILED"; tail -8 /tmp/san.log
        fi
      done
    done
    /tmp/sanitize_main "$K/$lib.so" --shape 4,32,8,3000,3000 --repeat 20 | tail -1
  done
} > "$OUT/race.txt" 2>&1
grep -q "FAILED\|[1-9][0-9]* not bit-identical" "$OUT/race.txt" && status=1
grep -c clean "$OUT/race.txt" | sed 's/^/sanitizer runs clean: /'; grep -E "FAILED|identical" "$OUT/race.txt" | head -12
echo "== 6. variants: new and old kernels, numerics and FlexAttention == ($SECONDS s)"
W=/tmp/qattn_kir_variants; rm -rf $W; mkdir -p $W/new $W/old
gen() {  # SET NAME FLAGS...
  local set=$1 name=$2; shift 2
  if [ "$set" = old ]; then
    QATTN_DEVICE_DIR="$OLD/device" QATTN_CACHE_DIR=$W/cache_old "$OLD/bin/qattn" generate --preset llama3-8b --gpu h100 "$@" --out $W/$set/$name --no-verify > $W/$set/$name.log 2>&1
  else
    QATTN_CACHE_DIR=$W/cache_new "$BIN/qattn" generate --preset llama3-8b --gpu h100 "$@" --out $W/$set/$name --no-verify > $W/$set/$name.log 2>&1
  fi || { echo "build $set/$name FAILED"; tail -5 $W/$set/$name.log; }
}
export QATTN_CUTLASS_INCLUDE=$CUT
for set in new old; do
  gen $set softcap --softcap 30 &
  gen $set alibi --alibi &
  gen $set prefix_lm --prefix-lm 100 &
  gen $set document --document &
  gen $set relative_bias --relative-bias 32 &
  gen $set doc_softcap --document --softcap 50 --alibi &
  gen $set custom --mask-mod 'kv_idx <= q_idx + seqlen_k - seqlen_q and (kv_idx >= q_idx + seqlen_k - seqlen_q - 64 or kv_idx % 256 < 16)' &
  for w in 256 1024 4096; do gen $set window_$w --window $w,0 & done
done
wait
echo '{"keep": "(k <= q + off) & ((k >= q + off - 64) | (k % 256 < 16))"}' > $W/new/custom/variants.json
python3 "$ROOT/tests/gpu/verify_variants.py" $W/new > "$OUT/verify_variants.log" 2>&1 || status=1
grep -E "checks pass|FAIL" "$OUT/verify_variants.log" | tail -6
python3 "$ROOT/bench/bench_variants.py" $W/new "$OUT/variants.csv" --also old=$W/old > "$OUT/bench_variants.log" 2>&1 || status=1
grep -v Warning "$OUT/bench_variants.log" | tail -16
cp $W/new/softcap/kernel.cu "$OUT/sm90_softcap_kernel.cu" 2>/dev/null; cp $W/new/document/kernel.cu "$OUT/sm90_document_kernel.cu" 2>/dev/null
cp $W/new/document/kernel.kir "$OUT/sm90_document_kernel.kir" 2>/dev/null
echo "part 2 done in $SECONDS s"
exit $status
