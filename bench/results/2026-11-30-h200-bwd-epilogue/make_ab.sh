#!/usr/bin/env bash
# On the CPU machine: the A/B translation units of the same TL programs. par_NAME.cu: main before the
# epilogue change (out/ab/ep_base/qattn_translate: dQ by TMA, dK / dV by the threads' stores or float4
# reductions); new_NAME.cu: this tree's (dK / dV staged in the loop's buffers, TMA stores / reductions).
set -euo pipefail
D=out/ep; mkdir -p "$D"
CONFIGS=(
  "d128_causal|--preset llama3-8b"
  "d128_none|--preset llama3-8b --mask none"
  "d128_causal_mha|--preset llama2-7b"
  "d128_none_mha|--preset llama2-7b --mask none"
  "d64_causal|--preset llama3.2-1b"
  "d64_none_mha|--preset llama3.2-1b --mask none --heads 16,16"
  "d128_window_mha|--preset mistral-7b --window 256,0 --heads 32,32"
  "d128_doc|--preset llama3-8b --document true"
  "d256_causal_mha|--preset gemma-7b"
  "mla_causal|--preset deepseek-v3-mla-prefill"
)
for c in "${CONFIGS[@]}"; do
  n="${c%%|*}"; flags="${c#*|}"
  # shellcheck disable=SC2086
  build/qattn plan $flags --gpu h100 --backward --no-verify --print 2>/dev/null | sed -n '/^Kernel /,$p' > "$D/$n.tl"
  for v in par new; do
    bin=build/qattn_translate; [ $v = par ] && bin=out/ab/ep_base/qattn_translate
    $bin "$D/$n.tl" --gpu h100 -o "$D/${v}_$n.cu" >/dev/null
    $bin "$D/$n.tl" --gpu h100 --flags > "$D/${v}_$n.flags"
  done
  echo "$n: new $(grep -c 'store_acc_global_tma<\|add_acc_global_tma<[0-9]*, [0-9]*, true>(Mma[^,]*, rd[KV]' "$D/new_$n.cu") TMA epilogue copies"
done
