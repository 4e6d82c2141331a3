#!/bin/bash
# The TL of the d256 backward libraries (H100/H200 target): w_* the planner's natural form on wgmma
# (this change), m_* the same spec with --bwd-form natural-mma (the mma.sync form it replaces), and a
# planted bug (dK not scaled) in the wgmma form. Run from an empty folder; then build.sh.
B=${QATTN:-/work/main/build/qattn}
gen() { name=$1; shift; for f in natural natural-mma; do tag=$([ $f = natural ] && echo w || echo m)
  $B plan --backward --gpu h100 --head-dim 256 --name d256_${name}_$tag "$@" --bwd-form $f --print | sed -n '/^Kernel/,$p' > ${tag}_$name.tl; done; }
gen causal --heads 16 --mask causal
gen none --heads 16 --mask none
gen gqa --heads 32/8 --mask causal
gen softcap --heads 16 --mask causal --softcap 30
gen window --heads 16 --window 256,0
gen doc --heads 16 --mask causal --document true
gen det --heads 32/8 --mask causal --deterministic true
grep -v "Compute Multiply dK, softmax_scale" w_causal.tl | sed 's/d256_causal_w/d256_neg_no_dk_scale/' > neg_noscale.tl
