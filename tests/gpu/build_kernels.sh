#!/usr/bin/env bash
# Builds the GPU test/benchmark kernels: for each config, stage 1 writes the TL code, stage 2
# translates it, nvcc builds a shared library exporting the C ABI (include/qattn/qattn.h).
#
#   tests/gpu/build_kernels.sh OUT_DIR [--run-sm 90] [--bin BUILD_DIR] [--cutlass INCLUDE_DIR] [-j N] [--only REGEX]
#                              [--device DIR] [--classic]
#
#   OUT_DIR/<name>.tl .cu .so .log   (the .log has nvcc's -Xptxas -v: registers and spills)
#   OUT_DIR/ptxas.txt                one line per kernel: registers, spill bytes
#
# --run-sm 90 builds machine code for the GPU that will run the tests (an H100 is sm_90): the
# kernel's own architecture (compute_80, compute_75, compute_89) is kept as the PTX target, so the
# sm80 lowering runs on Hopper (an sm_80 cubin would not load there). Default: the translator's
# -gencode (the planned GPU). CUTLASS headers: --cutlass, $CUTLASS_INCLUDE, <repo>/.cutlass/include,
# or the nvidia-cutlass Python package. --device DIR compiles against another copy of the device
# runtime (default <repo>/device; e.g. the previous commit's, for a same-process A/B of a kernel change).
# sm90a kernels build as the library does (`qattn_translate --build`: the split build, src/build/nvcc.h)
# when the translator has --build, else (or with --classic) with `nvcc -shared` like the others.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT=""; RUN_SM=""; CLASSIC=0; BIN="$ROOT/build"; CUTLASS="${CUTLASS_INCLUDE:-}"; JOBS="$(nproc)"; ONLY=""; DEVICE="$ROOT/device"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
while [ $# -gt 0 ]; do
  case "$1" in
    --run-sm) RUN_SM="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --cutlass) CUTLASS="$2"; shift 2 ;;
    -j) JOBS="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --classic) CLASSIC=1; shift ;;
    -h|--help) sed -n 2,21p "$0"; exit 0 ;;
    *) if [ -z "$OUT" ]; then OUT="$1"; shift; else echo "unexpected argument $1" >&2; exit 2; fi ;;
  esac
done
[ -n "$OUT" ] || { echo "usage: $0 OUT_DIR [--run-sm 90] [--bin BUILD_DIR] [--cutlass DIR] [-j N]" >&2; exit 2; }
if [ -z "$CUTLASS" ]; then
  if [ -d "$ROOT/.cutlass/include/cute" ]; then CUTLASS="$ROOT/.cutlass/include"
  else CUTLASS="$(python3 -c 'import cutlass_library;print(cutlass_library.source_path+"/include")' 2>/dev/null || true)"; fi
fi
[ -d "$CUTLASS/cute" ] || { echo "CUTLASS/CuTe headers not found (--cutlass DIR)" >&2; exit 1; }
QATTN="$BIN/qattn"; XLATE="$BIN/qattn_translate"
[ -x "$QATTN" ] && [ -x "$XLATE" ] || { echo "build qattn and qattn_translate first (ninja -C $BIN qattn qattn_translate)" >&2; exit 1; }
mkdir -p "$OUT"
SPLIT=0
if [ "$CLASSIC" = 0 ] && "$XLATE" --help | grep -q -- --build; then SPLIT=1; fi

# name | planned GPU | qattn plan flags [| sed script applied to the TL]. Kernels named neg_* come
# from deliberately broken TL; verify.py expects them to compute wrong answers.
CONFIGS=(
  "sm80_d128_causal|a100|--preset llama2-7b"
  "sm80_d128_none_lse|a100|--preset llama2-7b --mask none --lse true"
  "sm80_d64_causal|a100|--preset llama3.2-1b"
  "sm80_d64_none|a100|--preset llama3.2-1b --mask none"
  "sm80_d64_none_fp16|a100|--preset bert-large --dtype fp16"
  "sm80_d128_topleft_lse|a100|--preset llama2-7b --mask causal_top_left --lse true"
  "sm80_d128_window|a100|--preset mistral-7b --window 256,0"
  "sm80_mla_causal_lse|a100|--preset deepseek-v3-mla-prefill --lse true"
  "sm80_d128_bm64_causal|a100|--preset llama2-7b --tiles 64,64,4,1"
  # V wider than Q and K (head_dim_v > head_dim_qk): the wider head dim picks the tiles; on Hopper O
  # stages in a tile of its own
  "sm80_widev_64_128_causal|a100|--preset llama3-8b --head-dim 64,128"
  "sm80_widev_128_256_none|a100|--preset llama2-7b --head-dim 128,256 --mask none"
  "sm90_widev_64_128_causal|h100|--preset llama3-8b --head-dim 64,128"
  "sm90_widev_64_128_none_lse|h100|--preset llama2-7b --head-dim 64,128 --mask none --lse true"
  "sm90_widev_128_256_none|h100|--preset llama2-7b --head-dim 128,256 --mask none"
  "sm90_widev_64_256_causal|h100|--preset llama3-8b --head-dim 64,256"
  "sm75_d64_none|t4|--preset bert-large --dtype fp16"
  "sm75_d128_causal|t4|--preset llama2-7b --dtype fp16"
  "sm89_fp8_d128_causal|l40s|--preset llama2-7b --dtype fp8_e4m3"
  "sm89_fp8_d128_none|l40s|--preset llama3-8b --dtype fp8_e4m3 --mask none"
  "neg_sm80_no_rescale_o|a100|--preset llama2-7b --mask none|/Compute Rescale O, alpha/d"
  # Hopper (sm90a): TMA + wgmma, warp-specialised (emit_sm90.cc)
  "sm90_d128_causal|h100|--preset llama3-8b"
  "sm90_d128_none|h100|--preset llama2-7b --mask none"
  "sm90_d128_none_lse|h100|--preset llama2-7b --mask none --lse true"
  "sm90_d64_causal|h100|--preset llama3.2-1b"
  "sm90_d64_none|h100|--preset llama3.2-1b --mask none"
  "sm90_d256_causal|h100|--preset llama2-7b --head-dim 256"
  "sm90_d256_none|h100|--preset llama2-7b --head-dim 256 --mask none"
  "sm90_mla_causal_lse|h100|--preset deepseek-v3-mla-prefill --lse true"
  "sm90_mla_none|h100|--preset deepseek-v3-mla-prefill --mask none"
  "sm90_d128_window|h100|--preset mistral-7b --window 256,0"
  "sm90_d128_topleft_fp16|h100|--preset llama2-7b --mask causal_top_left --dtype fp16"
  "sm90_d96_none|h100|--preset llama2-7b --head-dim 96 --mask none"
  # the other grid form of the benchmark kernels (an A/B in one process: bench_sm90.py --also):
  # d128 and MLA with one block per tile, d64 and d256 with the TL Grid `{persistent}`
  "sm90alt_d128_causal|h100|--preset llama3-8b|s/ {persistent}$//; s/registers 40$/registers 24/; s/registers 232 /registers 240 /"
  "sm90alt_d128_none|h100|--preset llama2-7b --mask none|s/ {persistent}$//; s/registers 40$/registers 24/; s/registers 232 /registers 240 /"
  "sm90alt_d64_causal|h100|--preset llama3.2-1b|s/^Grid .*/& {persistent}/; s/registers 24$/registers 40/; s/registers 240 /registers 232 /"
  "sm90alt_d64_none|h100|--preset llama3.2-1b --mask none|s/^Grid .*/& {persistent}/; s/registers 24$/registers 40/; s/registers 240 /registers 232 /"
  "sm90alt_d256_causal|h100|--preset llama2-7b --head-dim 256|s/^Grid .*/& {persistent}/; s/registers 24$/registers 40/; s/registers 240 /registers 232 /"
  "sm90alt_d256_none|h100|--preset llama2-7b --head-dim 256 --mask none|s/^Grid .*/& {persistent}/; s/registers 24$/registers 40/; s/registers 240 /registers 232 /"
  "sm90alt_mla_causal_lse|h100|--preset deepseek-v3-mla-prefill --lse true|s/ {persistent}$//; s/registers 40$/registers 24/; s/registers 232 /registers 240 /"
  "sm90alt_mla_none|h100|--preset deepseek-v3-mla-prefill --mask none|s/ {persistent}$//; s/registers 40$/registers 24/; s/registers 232 /registers 240 /"
  "sm90p_d256_none|h100|--preset llama2-7b --head-dim 256 --mask none|s/^Grid .*/& {persistent}/; s/registers 24$/registers 40/; s/registers 240 /registers 232 /"
  # A/B: the persistent d128 kernels with FlashAttention-3's register split 24 / 240 (the producer
  # warp's tile-scheduler code then spills)
  "sm90r240_d128_none|h100|--preset llama2-7b --mask none|s/registers 40$/registers 24/; s/registers 232 /registers 240 /"
  "sm90r240_d128_causal|h100|--preset llama3-8b|s/registers 40$/registers 24/; s/registers 232 /registers 240 /"
  # A/B: the d128 non-causal kernel with FlashAttention-3's K/V tile (BN = 176; O then staged in Q's tile)
  "sm90bn176_d128_none|h100|--preset llama2-7b --mask none|s/BN = 128/BN = 176/"
  # GQA packing (TL `{pack: heads_q / heads_kv}`): the planner packs when the spec states a short
  # query length (--seqlen SQ/SK); heads are launch parameters, so these also run MHA and MQA cases
  "sm90pk_d128_causal|h100|--preset llama3-8b --seqlen 16/4096"
  "sm90pk_d128_none|h100|--preset llama3-8b --mask none --seqlen 16/4096"
  "sm90pk_d128_none_lse|h100|--preset llama3-8b --mask none --lse true --seqlen 64/4096"
  "sm90pkt_d128_64x128s2|h100|--preset llama3-8b --mask none --lse true --seqlen 64/4096 --tiles 64,128,8,2"
  "sm90pkt_d128_64x128s3|h100|--preset llama3-8b --mask none --lse true --seqlen 64/4096 --tiles 64,128,8,3"
  "sm90pkt_d128_64x64s4|h100|--preset llama3-8b --mask none --lse true --seqlen 64/4096 --tiles 64,64,8,4"
  "sm90pkt_d128_128x128s3|h100|--preset llama3-8b --mask none --lse true --seqlen 64/4096 --tiles 128,128,12,3"
  "sm90pk_d64_none|h100|--preset llama3.2-1b --mask none --seqlen 16/4096"
  "sm90pk_d128_window|h100|--preset mistral-7b --window 256,0 --seqlen 32/4096"
  "sm90pk_d64_topleft_fp16|h100|--preset llama3.2-1b --mask causal_top_left --dtype fp16 --seqlen 8/1024"
  "sm90pk_d256_causal|h100|--preset llama2-7b --head-dim 256 --heads 16/4 --seqlen 16/2048"
  # broken TL: the packed Grid launches one query head's worth of row tiles (the other heads' rows are never computed)
  "neg_sm90_pack_short_grid|h100|--preset llama3-8b --mask none --seqlen 16/4096|s/cdiv(seqlen_q \* (heads_q \/ heads_kv), BM)/cdiv(seqlen_q, BM)/"
  "neg_sm90_scale_no_log2e|h100|--preset llama2-7b --mask none|s/Multiply S, softmax_scale \* log2e/Multiply S, softmax_scale/"
  # TL edits that change the Hopper kernel with no C++ change (issue 17, the kernel IR):
  # a TL bug gives a kernel that computes it (here: O is never rescaled, the answer is wrong)
  "neg_sm90_no_rescale_o|h100|--preset llama2-7b --mask none|/Compute Rescale O, alpha/d"
  # issue 18: a key loop cut at two tiles (the TL check refuses it; built here past that check, the
  # kernel must fail the GPU numerics at every length beyond 2 key tiles)
  "neg_sm90_truncated_loop|h100|--preset llama3-8b --mask none|s/for j = 0: cdiv(seqlen_k, BN)/for j = 0: min(2, cdiv(seqlen_k, BN))/"
  # a legal reordering of the softmax statements: alpha computed after P and its row sum
  "sm90tl_reorder_d128_causal|h100|--preset llama3-8b|/^  Compute Subtract m, m_new and get alpha$/d; /^  Compute Exp2 alpha$/d; s/^  Compute RowSum P and get l_tile$/&\n  Compute Subtract m, m_new and get alpha\n  Compute Exp2 alpha/"
  "sm90tl_reorder_d64_none|h100|--preset llama3.2-1b --mask none|/^  Compute Subtract m, m_new and get alpha$/d; /^  Compute Exp2 alpha$/d; s/^  Compute RowSum P and get l_tile$/&\n  Compute Subtract m, m_new and get alpha\n  Compute Exp2 alpha/"
  # the schedule A/Bs of bench/results/2026-11-24-h100-sm90-ab that needed C++ edits, as TL edits:
  # FlashAttention-3's order (O rescaled by the previous alpha right before the P V issue)
  "sm90tl_fa3order_d128_none|h100|--preset llama2-7b --mask none|s/^  Compute Rescale O, alpha$/& {stage: 1}/"
  "sm90tl_fa3order_d128_causal|h100|--preset llama3-8b|s/^  Compute Rescale O, alpha$/& {stage: 1}/"
  # the P V wait and the conversion of P moved to the next step (the softmax runs under P V)
  "sm90tl_pvnext_d128_none|h100|--preset llama2-7b --mask none|s/^  Compute Convert P and get Pc bf16$/& {stage: 1}/; s/^  Reshape Pc .*/& {stage: 1}/"
  "sm90tl_pvnext_d128_causal|h100|--preset llama3-8b|s/^  Compute Convert P and get Pc bf16$/& {stage: 1}/; s/^  Reshape Pc .*/& {stage: 1}/"
  # the O store waited for at once (the deferred TMA-store wait off)
  "sm90tl_syncstore_d128_none|h100|--preset llama2-7b --mask none|s/^\(Copy O .*\) {async}$/\1/"
  "sm90tl_syncstore_d128_causal|h100|--preset llama3-8b|s/^\(Copy O .*\) {async}$/\1/"
  # no GEMM/softmax overlap within a warpgroup
  "sm90tl_nooverlap_d128_none|h100|--preset llama2-7b --mask none|s/ {overlap}$//"
  # issue 21: the window and the softcap are launch arguments (TL builtins); const_* is the same TL
  # with the values written in (the previous form), for bench/bench_launch_args.py's A/B
  "sm90_d128_window4k|h100|--preset mistral-7b --window 4096,0"
  "const_sm90_d128_window|h100|--preset mistral-7b --window 256,0|s/window(window_left, window_right)/window(256, 0)/g; s/- window_left) \/ BN/- 256) \/ BN/; s/+ window_right, BN/+ 0, BN/"
  "const_sm90_d128_window4k|h100|--preset mistral-7b --window 4096,0|s/window(window_left, window_right)/window(4096, 0)/g; s/- window_left) \/ BN/- 4096) \/ BN/; s/+ window_right, BN/+ 0, BN/"
  "sm90_d256_softcap|h100|--preset gemma2-9b"
  "const_sm90_d256_softcap|h100|--preset gemma2-9b|s/softcap \* tanh(score \/ softcap)/50.0 * tanh(score \/ 50.0)/"
  "sm90_d128_softcap|h100|--preset llama3-8b --softcap 30"
  "const_sm90_d128_softcap|h100|--preset llama3-8b --softcap 30|s/softcap \* tanh(score \/ softcap)/30.0 * tanh(score \/ 30.0)/"
  "const_sm80_d128_window|a100|--preset mistral-7b --window 256,0|s/window(window_left, window_right)/window(256, 0)/g; s/- window_left) \/ BN/- 256) \/ BN/; s/+ window_right, BN/+ 0, BN/"
)

build_one() {
  local name="$1" gpu="$2" flags="$3" edit="${4:-}"
  local tl="$OUT/$name.tl" cu="$OUT/$name.cu" so="$OUT/$name.so" log="$OUT/$name.log"
  # shellcheck disable=SC2086
  "$QATTN" plan --gpu "$gpu" --print $flags > "$tl" 2> "$log" || { echo "$name: qattn plan failed (see $log)"; return 1; }
  if [ -n "$edit" ]; then sed -i "$edit" "$tl"; fi
  "$XLATE" "$tl" --gpu "$gpu" -o "$cu" 2>> "$log" || { echo "$name: translation failed (see $log)"; return 1; }
  local gencode
  gencode="$("$XLATE" "$tl" --gpu "$gpu" --flags)"
  if [ -n "$RUN_SM" ] && ! echo "$gencode" | grep -q 'compute_90a'; then  # sm90a kernels are native already
    local virt
    virt="$(echo "$gencode" | grep -o 'arch=compute_[0-9a-z]*' | head -1 | cut -d_ -f2)"
    gencode="$(echo "$gencode" | sed 's/-gencode=[^ ]*//g') -gencode=arch=compute_${virt},code=sm_${RUN_SM} -gencode=arch=compute_${virt},code=compute_${virt}"
  fi
  if [ "$SPLIT" = 1 ] && echo "$gencode" | grep -q 'compute_90a'; then
    if ! QATTN_DEVICE_DIR="$DEVICE" QATTN_CUTLASS_INCLUDE="$CUTLASS" QATTN_NVCC="$NVCC" QATTN_CACHE_DIR="$OUT/.cache" \
         "$XLATE" "$tl" --gpu "$gpu" --build "$so" >> "$log" 2>&1; then
      echo "$name: build failed (see $log)"; return 1
    fi
  # shellcheck disable=SC2086
  elif ! "$NVCC" $gencode -Xptxas -v -Xcompiler -fPIC -shared -I"$DEVICE" -I"$ROOT/include" -I"$CUTLASS" \
       "$cu" -o "$so" >> "$log" 2>&1; then
    echo "$name: nvcc failed (see $log)"; return 1
  fi
  local regs spill
  regs="$(grep -o 'Used [0-9]* registers' "$log" | tail -1 | grep -o '[0-9]*')"
  spill="$(grep -o '[0-9]* bytes spill stores' "$log" | tail -1 | grep -o '^[0-9]*')"
  echo "$name: ok, $regs registers, ${spill:-0} bytes spill stores"
}

pids=(); names=()
for c in "${CONFIGS[@]}"; do
  IFS='|' read -r name gpu flags edit <<< "$c"
  if [ -n "$ONLY" ] && ! [[ "$name" =~ $ONLY ]]; then continue; fi
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  ( build_one "$name" "$gpu" "$flags" "$edit" > "$OUT/$name.status" 2>&1 ) &
  pids+=($!); names+=("$name")
done
rc=0
for i in "${!pids[@]}"; do wait "${pids[$i]}" || rc=1; done
: > "$OUT/ptxas.txt"
for n in "${names[@]}"; do cat "$OUT/$n.status" | tee -a "$OUT/ptxas.txt"; grep -q ": ok" "$OUT/$n.status" || rc=1; done
exit $rc
