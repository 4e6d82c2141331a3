#!/usr/bin/env bash
# The main job: install what is missing, build, then generate a kernel for a preset on the built-in
# rules engine: sketch -> TL code (checked, interpreted against the fp64 reference) -> CUDA C++ on
# CuTe -> nvcc shared library; on a machine with a GPU it is verified there and timed next to
# torch's FlashAttention-2 and cuDNN backends. Without a GPU it stops after compiling and says so.
#   scripts/run.sh [PRESET] [GPU]      defaults: llama3-8b, a100 (the sm80 path, which also runs on Hopper)
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-llama3-8b}
GPU=${2:-a100}
bash scripts/setup.sh
echo "== build =="
bash scripts/build.sh
OUT=artifacts/$PRESET-$GPU
echo "== qattn generate --preset $PRESET --gpu $GPU --out $OUT =="
./build/qattn generate --preset "$PRESET" --gpu "$GPU" --out "$OUT"
echo "== the TL code once more through the interpreter: qattn tl run $OUT/code.tl =="
./build/qattn tl run "$OUT/code.tl" --dims batch=2,heads_q=4,heads_kv=2,seqlen_q=200,seqlen_k=257 --precision fp64
echo "== done: $OUT holds spec.json, sketch.tl, code.tl, plan.md, kernel.cu, libqattn_kernel.so, build.log =="
