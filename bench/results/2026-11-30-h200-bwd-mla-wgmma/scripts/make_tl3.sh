#!/bin/bash
# The TL of run3.sh's libraries: the planner's MLA 192/128 backward for Hopper (BN = 128 on wgmma)
# with every mask and variant, and a planted bug (dK not scaled). Run from an empty folder.
B=${QATTN:-/work/main/build/qattn}
gen() { name=$1; shift; $B plan --backward --gpu h100 --name mla_${name} --preset deepseek-v3-mla-prefill "$@" --print | sed -n '/^Kernel/,$p' > mla_$name.tl; }
gen causal --mask causal; gen none --mask none; gen gqa --heads 16/2 --mask causal; gen softcap --mask causal --softcap 30
gen window --window 200,0; gen doc --mask causal --document true; gen det --heads 16/4 --mask causal --deterministic true
gen topleft --mask causal_top_left
grep -v "Compute Multiply dK, softmax_scale" mla_causal.tl | sed 's/flash_bwd_mla_causal/flash_bwd_neg_mla128_no_dk_scale/' > neg_mla128_noscale.tl
