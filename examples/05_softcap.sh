#!/usr/bin/env bash
# Logit softcapping (Gemma 2, Grok): every score becomes c * tanh(s / c). `--softcap 30` makes the
# planner write a TL `Score softcap = softcap * tanh(score / softcap)` declaration (over the launch
# argument `softcap`: one kernel for every cap) and a `Compute Modify` in the loop; `qattn plan`
# interprets the TL code against the spec's own C++ formula; `qattn tl run --softcap 30` runs it again.
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$Q plan --preset llama3.2-1b --gpu a100 --softcap 30 --out "$OUT/softcap"
grep -E "^Score|Modify|Multiply S" "$OUT/softcap/code.tl"
$Q tl run "$OUT/softcap/code.tl" --dims batch=2,heads_q=4,heads_kv=2,seqlen_q=150,seqlen_k=200 --precision fp64 --softcap 30
$Q tl run "$OUT/softcap/code.tl" --dims batch=2,heads_q=4,heads_kv=2,seqlen_q=150,seqlen_k=200 --precision storage --softcap 30
# The Gemma 2 preset carries its softcap of 50.
$Q spec show --preset gemma2-9b | grep -A2 '"variants"'
