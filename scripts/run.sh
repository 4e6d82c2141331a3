#!/usr/bin/env bash
# The main job: install what is missing, build, then run stage 1 on the built-in rules engine for a
# preset (sketch -> TL code, checked, refined, interpreted against the fp64 reference), write the
# artifacts, and interpret the written code.tl once more through the TL front end's CLI.
#   scripts/run.sh [PRESET] [GPU]      defaults: llama3-8b, the local GPU or h100
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-llama3-8b}
GPU=${2:-}
bash scripts/setup.sh
echo "== build =="
bash scripts/build.sh
QATTN=./build/qattn
if [ -z "$GPU" ]; then
  # The local GPU when the driver finds one (plan then targets it), else H100.
  if ! $QATTN gpus 2>/dev/null | grep -q "^local GPU 0:"; then GPU=h100; fi
fi
OUT=artifacts/${PRESET}${GPU:+-$GPU}
echo "== qattn plan --preset $PRESET ${GPU:+--gpu $GPU} --out $OUT =="
$QATTN plan --preset "$PRESET" ${GPU:+--gpu "$GPU"} --out "$OUT"
echo "== qattn tl check $OUT/code.tl =="
$QATTN tl check "$OUT/code.tl"
echo "== qattn tl run $OUT/code.tl (fp64 and storage precision) =="
DIMS=batch=2,heads_q=4,heads_kv=2,seqlen_q=300,seqlen_k=333
$QATTN tl run "$OUT/code.tl" --dims "$DIMS" --precision fp64
$QATTN tl run "$OUT/code.tl" --dims "$DIMS" --precision storage
echo "== done: $OUT holds spec.json, sketch.tl, code.tl, plan.md =="
