#!/bin/bash
# The TL of the MLA 192/128 and d192 backward libraries (H100/H200 target): w_* the planner's natural
# form on wgmma (tiles of 192 columns in atoms of 32: the 64-byte swizzle), m_* the same spec with
# --bwd-form natural-mma (the mma.sync form it replaces), w_d256_causal (the 128-byte path after the
# descriptor change), and a planted bug (dK not scaled). Run from an empty folder.
B=${QATTN:-/work/main/build/qattn}
gen() { name=$1; shift; for f in natural natural-mma; do tag=$([ $f = natural ] && echo w || echo m)
  $B plan --backward --gpu h100 --name bw_${name}_$tag "$@" --bwd-form $f --print | sed -n '/^Kernel/,$p' > ${tag}_$name.tl; done; }
gen mla_causal --preset deepseek-v3-mla-prefill --mask causal
gen mla_none --preset deepseek-v3-mla-prefill --mask none
gen mla_gqa --preset deepseek-v3-mla-prefill --heads 16/4 --mask causal
gen mla_softcap --preset deepseek-v3-mla-prefill --mask causal --softcap 30
gen d192_causal --head-dim 192 --heads 16 --mask causal
gen d192_none --head-dim 192 --heads 16 --mask none
$B plan --backward --gpu h100 --head-dim 256 --name d256_causal_w --heads 16 --mask causal --print | sed -n '/^Kernel/,$p' > w_d256_causal.tl
grep -v "Compute Multiply dK, softmax_scale" w_mla_causal.tl | sed 's/bw_mla_causal_w/bw_neg_mla_no_dk_scale/' > neg_mla_noscale.tl
