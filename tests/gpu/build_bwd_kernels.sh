#!/usr/bin/env bash
# Builds the backward kernels of the GPU checks (issue 19): each config is a TL program, translated by
# qattn_translate (the backward lowering, src/backend/bwd) and built by nvcc into a library exporting
# qattn_bwd. Configs named neg_* carry a planted bug that passes the checker; tests/gpu/bwd_check.py
# --planted expects them to fail.
#
#   tests/gpu/build_bwd_kernels.sh OUT_DIR [--bin BUILD_DIR] [--gpu h100] [--only REGEX] [-j N]
#                                  [--extra 'NAME|qattn plan flags'] ...   (more configs, e.g. tile A/Bs)
#                                  [--tl NAME=FILE.tl] [--cu NAME=FILE.cu] ...  (a TL program, or CUDA
#                                  translated elsewhere, e.g. by the parent commit: the A/B baseline)
#
# The programs come from `qattn plan --backward` (the rules engine's backward TL) with the flags of
# each config, optionally edited by a sed script (the planted bugs).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT=""; BIN="$ROOT/build"; GPU="h100"; ONLY=""; JOBS="$(nproc)"; EXTRA=(); FILES=()
CUTLASS="${CUTLASS_INCLUDE:-$ROOT/.cutlass/include}"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --gpu) GPU="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    -j) JOBS="$2"; shift 2 ;;
    --extra) EXTRA+=("$2"); shift 2 ;;
    --tl|--cu) FILES+=("${1#--}|$2"); shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) if [ -z "$OUT" ]; then OUT="$1"; shift; else echo "unexpected argument $1" >&2; exit 2; fi ;;
  esac
done
[ -n "$OUT" ] || { echo "usage: $0 OUT_DIR [--bin BUILD_DIR] [--gpu NAME] [--only REGEX]" >&2; exit 2; }
[ -d "$CUTLASS/cute" ] || { echo "CUTLASS/CuTe headers not found (CUTLASS_INCLUDE)" >&2; exit 1; }
mkdir -p "$OUT"
# name | qattn plan flags [| sed script applied to the TL]
CONFIGS=(
  "bwd_d64_causal|--preset llama3.2-1b"
  "bwd_d128_causal|--preset llama3-8b"
  "bwd_d128_none|--preset llama3-8b --mask none"
  "bwd_d64_none_mha|--preset llama3.2-1b --mask none --heads 16,16"
  "bwd_d128_window_mha|--preset mistral-7b --window 256,0 --heads 32,32"
  "bwd_mla_causal|--preset deepseek-v3-mla-prefill"
  "bwd_fp16_d128_topleft_mha|--preset llama2-7b --mask causal_top_left --dtype fp16"
  "bwd_d256_causal|--preset llama3-8b --head-dim 256"
  "bwd_d128_doc|--preset llama3-8b --document true"
  "bwd_d64_doc_none_mha|--preset llama3.2-1b --document true --mask none --heads 16,16"
  "bwd_d128_causal_det|--preset llama3-8b --deterministic true"
  "bwd_d64_none_mha_det|--preset llama3.2-1b --mask none --heads 16,16 --deterministic true"
  "bwd_d128_doc_det|--preset llama3-8b --document true --deterministic true"
  # V wider than Q and K (the transposed form at 64 / 128, the natural one on mma.sync above), and the
  # reverse 128 / 64 (the transposed form since d_qk != d_v is lowered there)
  "bwd_widev_64_128_causal|--preset llama3-8b --head-dim 64,128"
  "bwd_widev_64_128_none_mha|--preset llama2-7b --head-dim 64,128 --mask none"
  "bwd_widev_128_256_causal|--preset llama3-8b --head-dim 128,256"
  "bwd_narrowv_128_64_causal|--preset llama3-8b --head-dim 128,64"
  "neg_bwd_doc_clause|--preset llama3.2-1b --document true|s/seg_q\\[b, q_hi\\] < seg_k/seg_q[b, q_hi] <= seg_k/"
  "neg_bwd_no_dk_scale|--preset llama3.2-1b|/^Compute Multiply dK, softmax_scale$/d"
  "neg_bwd_late_first_tile|--preset llama3.2-1b|s/^for i = max(0, \\(.*\\)): /for i = max(0, \\1 + 1): /"
)
CONFIGS+=("${EXTRA[@]}")
# nvcc a translation unit with the flags its translation gave (FLAGS: qattn_translate --flags)
compile_cu() {
  local cu="$1" so="$2" log="$3" flags_nvcc="$4" device="${5:-$ROOT/device}"
  # shellcheck disable=SC2086
  "$NVCC" $flags_nvcc -I"$ROOT/include" -I"$device" -I"$CUTLASS" -shared -Xcompiler -fPIC -Xptxas -v \
    -o "$so" "$cu" >> "$log" 2>&1 || { echo "$(basename "$so" .so): nvcc failed (see $log)"; return 1; }
  # the largest of the unit's kernels (a Phase's row-wise kernel comes first)
  echo "$(basename "$so" .so): Used $(grep -o 'Used [0-9]* registers' "$log" | awk '$2 > m { m = $2 } END { print m + 0 }') registers, $(grep -o '[0-9]* bytes spill stores' "$log" | awk '$1 > m { m = $1 } END { print m + 0 }') bytes spill stores"
}
# --tl NAME=FILE.tl: translated here; --cu NAME=FILE.cu: built as it is, with the flags in FILE.flags
# and the device runtime in FILE's folder's device/ when there is one (the baseline's own headers)
build_file() {
  local kind="$1" name="$2" file="$3"
  local cu="$OUT/$name.cu" so="$OUT/$name.so" log="$OUT/$name.log"
  : > "$log"
  if [ "$kind" = tl ]; then
    cp "$file" "$OUT/$name.tl"
    "$BIN/qattn_translate" "$file" --gpu "$GPU" -o "$cu" >> "$log" 2>&1 || { echo "$name: translation failed (see $log)"; return 1; }
    compile_cu "$cu" "$so" "$log" "$("$BIN/qattn_translate" "$file" --gpu "$GPU" --flags)"
  else
    [ -f "${file%.cu}.flags" ] || { echo "$name: ${file%.cu}.flags (the unit's nvcc flags) is missing"; return 1; }
    cp "$file" "$cu"
    local dev="$ROOT/device"
    [ -d "$(dirname "$file")/device" ] && dev="$(cd "$(dirname "$file")/device" && pwd)"
    compile_cu "$cu" "$so" "$log" "$(cat "${file%.cu}.flags")" "$dev"
  fi
}
build_one() {
  local name="$1" flags="$2" script="$3"
  local dir="$OUT/$name.plan" tl="$OUT/$name.tl" cu="$OUT/$name.cu" so="$OUT/$name.so" log="$OUT/$name.log"
  rm -rf "$dir"
  # shellcheck disable=SC2086
  "$BIN/qattn" plan --backward $flags --gpu "$GPU" --out "$dir" > "$log" 2>&1 || { echo "$name: plan failed (see $log)"; return 1; }
  if [ -n "$script" ]; then sed -e "$script" "$dir/code.tl" > "$tl"; else cp "$dir/code.tl" "$tl"; fi
  cmp -s "$dir/code.tl" "$tl" && [ -n "$script" ] && { echo "$name: the sed script changed nothing"; return 1; }
  "$BIN/qattn_translate" "$tl" --gpu "$GPU" -o "$cu" >> "$log" 2>&1 || { echo "$name: translation failed (see $log)"; return 1; }
  compile_cu "$cu" "$so" "$log" "$("$BIN/qattn_translate" "$tl" --gpu "$GPU" --flags)"
}
pids=()
for f in "${FILES[@]}"; do
  IFS='|' read -r kind spec <<< "$f"
  build_file "$kind" "${spec%%=*}" "${spec#*=}" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
done
for c in "${CONFIGS[@]}"; do
  IFS='|' read -r name flags script <<< "$c"
  [ -n "$ONLY" ] && ! [[ "$name" =~ $ONLY ]] && continue
  build_one "$name" "$flags" "${script:-}" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
