#!/usr/bin/env bash
# Stage 1 on the rules engine for Llama-3-8B (GQA 32/8, d 128, causal) on an A100 and an H100.
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$Q sketch --preset llama3-8b --gpu a100
$Q plan --preset llama3-8b --gpu a100 --candidates --out "$OUT/a100"
$Q plan --preset llama3-8b --gpu h100 --out "$OUT/h100"
diff "$OUT/a100/code.tl" "$OUT/h100/code.tl" || true   # the same algorithm, other tiles and operand levels
