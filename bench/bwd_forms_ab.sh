#!/usr/bin/env bash
# The backward's two forms on one Hopper GPU, in one process (issue 19): the transposed form
# (S^T = K Q^T, every GEMM a wgmma; the sm90 default at d64 / d128) against the natural form
# (S = Q K^T on mma.sync, `qattn plan --backward --bwd-form natural`), both translated by this
# checkout's binaries; numerics first (tests/gpu/bwd_check.py, FlashAttention's gradient rule), then
# the timing of each library against SDPA's cuDNN and FlashAttention-2 backward.
#
#   bash bench/bwd_forms_ab.sh OUT_DIR [--bin BUILD_DIR] [--random N] [--shapes 'b,hq,hkv,sq,sk;...']
#
# Writes OUT_DIR/kernels/ (TL, CUDA, logs) and OUT_DIR/ab.csv (bwd_check's columns).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT=""; BIN="$ROOT/build"; RANDOM_N=3; SHAPES="4,16,16,4096,4096;2,16,16,8192,8192;1,16,16,16384,16384"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --random) RANDOM_N="$2"; shift 2 ;;
    --shapes) SHAPES="$2"; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) if [ -z "$OUT" ]; then OUT="$1"; shift; else echo "unexpected argument $1" >&2; exit 2; fi ;;
  esac
done
[ -n "$OUT" ] || { echo "usage: $0 OUT_DIR [--bin BUILD_DIR]" >&2; exit 2; }
K="$OUT/kernels"
mkdir -p "$K"
# transposed (default on sm90) | natural, MHA so that every shape runs on every library
bash "$ROOT/tests/gpu/build_bwd_kernels.sh" "$K" --bin "$BIN" --only '^ab_' -j "$(nproc)" \
  --extra 'ab_d128_causal|--preset llama2-7b' \
  --extra 'ab_d128_causal_nat|--preset llama2-7b --bwd-form natural' \
  --extra 'ab_d128_none|--preset llama2-7b --mask none' \
  --extra 'ab_d128_none_nat|--preset llama2-7b --mask none --bwd-form natural' \
  --extra 'ab_d64_causal|--preset llama3.2-1b --heads 16,16' \
  --extra 'ab_d64_causal_nat|--preset llama3.2-1b --heads 16,16 --bwd-form natural' \
  --extra 'ab_d64_none|--preset llama3.2-1b --heads 16,16 --mask none' \
  --extra 'ab_d64_none_nat|--preset llama3.2-1b --heads 16,16 --mask none --bwd-form natural' \
  --extra 'ab_d128_softcap|--preset llama2-7b --softcap 30' \
  --extra 'ab_d128_softcap_nat|--preset llama2-7b --softcap 30 --bwd-form natural'
libs=()
for n in d128_causal d128_none d64_causal d64_none d128_softcap; do libs+=("$K/ab_$n.so" "$K/ab_${n}_nat.so"); done
python3 "$ROOT/tests/gpu/bwd_check.py" "${libs[@]}" --random "$RANDOM_N" --bench --bench-shapes "$SHAPES" --csv "$OUT/ab.csv"
