#!/usr/bin/env bash
# The translation units of run1.sh (out/loop), on the CPU machine: each config's generated unit
# (_base, this tree's planner and translator) and make_var.py's variants of it.
#     bash bench/results/2026-12-01-h200-bwd-loop/make.sh
set -euo pipefail
B=${BIN:-build}; T=$(mktemp -d); H=$(dirname "$0")
mkdir -p out/loop
for cfg in "c128|--preset llama2-7b" "n128|--preset llama2-7b --mask none" "gqa128|--preset llama3-8b"; do
  n=${cfg%%|*}; f=${cfg#*|}
  # shellcheck disable=SC2086
  "$B/qattn" plan --backward $f --gpu h100 --out "$T/$n" > /dev/null
  "$B/qattn_translate" "$T/$n/code.tl" --gpu h100 -o "out/loop/${n}_base.cu"
  "$B/qattn_translate" "$T/$n/code.tl" --gpu h100 --flags > "out/loop/${n}_base.flags"
  python3 "$H/make_var.py" "out/loop/${n}_base.cu" "out/loop/$n"
done
rm -rf "$T"
