#!/usr/bin/env bash
# On the CPU machine, before the device calls: the A/B translation units of the same TL programs.
# par_NAME.cu: the parent's qattn_translate (main before this change, out/ab/base: dQ by the threads'
# float4 reductions); new_NAME.cu: this tree's (build/: dQ staged per warpgroup and added by TMA).
# The TL is `qattn plan --backward` with the flags below (tests/gpu/build_bwd_kernels.sh's configs).
set -euo pipefail
D=out/dqtma; mkdir -p "$D"
CONFIGS=(
  "d128_causal|--preset llama3-8b"
  "d128_none|--preset llama3-8b --mask none"
  "d128_causal_mha|--preset llama2-7b"
  "d64_causal|--preset llama3.2-1b"
  "d64_none_mha|--preset llama3.2-1b --mask none --heads 16,16"
  "d128_window_mha|--preset mistral-7b --window 256,0 --heads 32,32"
  "d128_doc|--preset llama3-8b --document true"
)
for c in "${CONFIGS[@]}"; do
  n="${c%%|*}"; flags="${c#*|}"
  # shellcheck disable=SC2086
  build/qattn plan $flags --gpu h100 --backward --no-verify --print 2>/dev/null | sed -n '/^Kernel /,$p' > "$D/$n.tl"
  out/ab/base/qattn_translate "$D/$n.tl" --gpu h100 -o "$D/par_$n.cu" >/dev/null
  build/qattn_translate "$D/$n.tl" --gpu h100 -o "$D/new_$n.cu" >/dev/null
  out/ab/base/qattn_translate "$D/$n.tl" --gpu h100 --flags > "$D/par_$n.flags"
  build/qattn_translate "$D/$n.tl" --gpu h100 --flags > "$D/new_$n.flags"
  # bar_: this tree's with the stage's own wait and barrier (add_acc_global_tma<.., false>) instead of
  # the wait folded into the iteration's first __syncthreads
  sed -e 's/add_acc_global_tma<\([0-9]*\), \([0-9]*\), true>/add_acc_global_tma<\1, \2, false>/' \
    -e '/the previous iteration.s TMA additions have read their stage/d' "$D/new_$n.cu" > "$D/bar_$n.cu"
  cp "$D/new_$n.flags" "$D/bar_$n.flags"
  echo "$n: par $(grep -c 'add_acc_global_v4<' "$D/par_$n.cu") v4, new $(grep -c 'add_acc_global_tma<' "$D/new_$n.cu") tma"
done
