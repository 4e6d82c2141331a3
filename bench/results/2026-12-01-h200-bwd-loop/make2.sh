#!/usr/bin/env bash
# The translation units of run4.sh (out/loop2), on the CPU machine: each config's unit from this
# tree (_n: dS^T stored by value pairs, the dQ stage's other warps arriving) and the parent's (_p),
# which differs from it in exactly those two calls (make2.sh checks the llama2-7b no-mask pair
# against the parent's own translation when out/loop/n128_base.cu from make.sh is there).
#     bash bench/results/2026-12-01-h200-bwd-loop/make2.sh
set -euo pipefail
B=${BIN:-build}; T=$(mktemp -d)
mkdir -p out/loop2
for cfg in "c128|--preset llama2-7b" "n128|--preset llama2-7b --mask none" "gqa128|--preset llama3-8b" \
           "ngqa128|--preset qwen2.5-72b --mask none" "c64|--preset llama3.2-1b --heads 32,32" "gqa64|--preset llama3.2-1b" \
           "c256|--preset gemma-7b" "mla|--preset deepseek-v3-mla-prefill --heads 16,16" "soft128|--preset llama2-7b --softcap 30" \
           "win128|--preset llama2-7b --window 256,0" "doc128|--preset llama2-7b --document true" \
           "det128|--preset llama3-8b --deterministic true" "a100_c128|--preset llama2-7b --gpu a100"; do
  n=${cfg%%|*}; f=${cfg#*|}; gpu=h100; [[ $f == *"--gpu a100"* ]] && gpu=a100 && f=${f/--gpu a100/}
  # shellcheck disable=SC2086
  "$B/qattn" plan --backward $f --gpu $gpu --out "$T/$n" > /dev/null 2>&1
  "$B/qattn_translate" "$T/$n/code.tl" --gpu $gpu -o "out/loop2/${n}_n.cu"
  # (the sm80 form also as PTX, so that this GPU runs it)
  "$B/qattn_translate" "$T/$n/code.tl" --gpu $gpu --flags | sed 's/code=sm_80/code=[sm_80,compute_80]/' > "out/loop2/${n}_n.flags"
  sed -E 's/store_acc_smem_pairs\(/store_acc_smem(/; s/add_acc_global_tma<([0-9]+), ([0-9]+), true, true>\(/add_acc_global_tma<\1, \2, true>(/' \
    "out/loop2/${n}_n.cu" > "out/loop2/${n}_p.cu"
  cp "out/loop2/${n}_n.flags" "out/loop2/${n}_p.flags"
  cmp -s "out/loop2/${n}_n.cu" "out/loop2/${n}_p.cu" && echo "$n: the parent's unit is the same"
done
[ -f out/loop/n128_base.cu ] && cmp out/loop/n128_base.cu out/loop2/n128_p.cu && echo "n128: the parent's unit is its own translation"
rm -rf "$T"
