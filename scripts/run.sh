#!/usr/bin/env bash
# The main job: install what is missing, build, then generate a kernel for a preset on the built-in
# rules engine: sketch -> TL code (checked, interpreted against the fp64 reference) -> CUDA C++ (on
# Hopper qattn's own PTX primitives, else CuTe) -> nvcc shared library; on a machine with a GPU it is verified there and timed next to
# torch's FlashAttention-2 and cuDNN backends. Without a GPU it stops after compiling and says so.
#   scripts/run.sh [PRESET] [GPU]      defaults: llama3-8b; the local GPU when nvidia-smi sees one
#                                      (qattn matches it to its GPU table), else h100 (the Hopper
#                                      sm90a path, compiled but not run)
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-llama3-8b}
if [ -n "${2:-}" ]; then GPU=$2
elif nvidia-smi -L > /dev/null 2>&1; then GPU=""  # `qattn generate` without --gpu: the local GPU
else GPU=h100; fi
bash scripts/setup.sh
echo "== build =="
bash scripts/build.sh
OUT=artifacts/$PRESET-${GPU:-local}
echo "== qattn generate --preset $PRESET ${GPU:+--gpu $GPU }--out $OUT =="
./build/qattn generate --preset "$PRESET" ${GPU:+--gpu "$GPU"} --out "$OUT"
echo "== the TL code once more through the interpreter: qattn tl run $OUT/code.tl =="
./build/qattn tl run "$OUT/code.tl" --dims batch=2,heads_q=4,heads_kv=2,seqlen_q=200,seqlen_k=257 --precision fp64
echo "== done: $OUT holds spec.json, sketch.tl, code.tl, plan.md, kernel.cu, libqattn_kernel.so, build.log =="
