#!/usr/bin/env bash
# The main job: install what is missing, build, then generate a kernel for a preset on the built-in
# rules engine: sketch -> TL code (checked, interpreted against the fp64 reference) -> CUDA C++ on
# CuTe -> nvcc shared library; on a machine with a GPU it is verified there and timed next to
# torch's FlashAttention-2 and cuDNN backends. Without a GPU it stops after compiling and says so.
#   scripts/run.sh [PRESET] [GPU]      defaults: llama3-8b; the local GPU when nvidia-smi sees one,
#                                      else h100 (the Hopper sm90a path, compiled but not run)
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-llama3-8b}
if [ -n "${2:-}" ]; then GPU=$2
elif name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) && [ -n "$name" ]; then
  case "$name" in
    *H200*) GPU=h200 ;; *H100*PCIe*) GPU=h100-pcie ;; *H100*) GPU=h100 ;; *A100*) GPU=a100 ;;
    *L40S*) GPU=l40s ;; *4090*) GPU=rtx4090 ;; *3090*) GPU=rtx3090 ;; *A10*) GPU=a10 ;; *T4*) GPU=t4 ;;
    *) GPU=a100; echo "[run] $name is not in qattn's GPU table: using the a100 (sm80) path" ;;
  esac
else GPU=h100; fi
bash scripts/setup.sh
echo "== build =="
bash scripts/build.sh
OUT=artifacts/$PRESET-$GPU
echo "== qattn generate --preset $PRESET --gpu $GPU --out $OUT =="
./build/qattn generate --preset "$PRESET" --gpu "$GPU" --out "$OUT"
echo "== the TL code once more through the interpreter: qattn tl run $OUT/code.tl =="
./build/qattn tl run "$OUT/code.tl" --dims batch=2,heads_q=4,heads_kv=2,seqlen_q=200,seqlen_k=257 --precision fp64
echo "== done: $OUT holds spec.json, sketch.tl, code.tl, plan.md, kernel.cu, libqattn_kernel.so, build.log =="
