#!/usr/bin/env bash
# The translation units of run1.sh (out/ord) and run3.sh (out/ord2), on the CPU machine.
#   run1 (main at bbed48c, before the planner change): each config's generated unit (_base) and two
#   grid orders made from it by make_order.py (_hfirst: heads first, the order the planner now writes;
#   _grp8: heads in groups of 8).
#   run3 (after it): the parent's program (PARENT_QATTN: bbed48c's qattn, key tiles first; _p) and this
#   tree's (_n, heads first), both translated by this tree's qattn_translate (the translator is unchanged).
#     bash make.sh ord|ord2 [PARENT_QATTN]
set -euo pipefail
B=${BIN:-build}; T=$(mktemp -d); H=$(dirname "$0")
if [ "$1" = ord ]; then
  mkdir -p out/ord
  for cfg in "c128|--preset llama2-7b" "n128|--preset llama2-7b --mask none" "gqa128|--preset llama3-8b" \
             "c64|--preset llama3.2-1b --heads 32,32" "c256|--preset gemma-7b" "mla|--preset deepseek-v3-mla-prefill --heads 16,16"; do
    n=${cfg%%|*}; f=${cfg#*|}
    # shellcheck disable=SC2086
    "$B/qattn" plan --backward $f --gpu h100 --out "$T/$n" > /dev/null
    "$B/qattn_translate" "$T/$n/code.tl" --gpu h100 -o "out/ord/${n}_base.cu"
    "$B/qattn_translate" "$T/$n/code.tl" --gpu h100 --flags > "out/ord/${n}_base.flags"
    python3 "$H/make_order.py" "out/ord/${n}_base.cu" "out/ord/$n" 8
    cp "out/ord/${n}_base.flags" "out/ord/${n}_hfirst.flags"; cp "out/ord/${n}_base.flags" "out/ord/${n}_grp8.flags"
  done
else
  P=${2:?the parent qattn}; mkdir -p out/ord2
  for cfg in "c128|--preset llama2-7b" "soft128|--preset llama2-7b --softcap 30" "c64|--preset llama3.2-1b --heads 32,32" \
             "mla|--preset deepseek-v3-mla-prefill --heads 16,16" "c256|--preset gemma-7b"; do
    n=${cfg%%|*}; f=${cfg#*|}
    # shellcheck disable=SC2086
    "$P" plan --backward $f --gpu h100 --out "$T/p_$n" > /dev/null
    # shellcheck disable=SC2086
    "$B/qattn" plan --backward $f --gpu h100 --out "$T/n_$n" > /dev/null
    for v in p n; do
      "$B/qattn_translate" "$T/${v}_$n/code.tl" --gpu h100 -o "out/ord2/${n}_$v.cu"
      "$B/qattn_translate" "$T/${v}_$n/code.tl" --gpu h100 --flags > "out/ord2/${n}_$v.flags"
    done
  done
fi
rm -rf "$T"
