#!/bin/bash
# The planner's d64 backward TL for Hopper (LSE and D `{at_use}`) with every mask and variant, the
# same TL without `{at_use}` (base_*: the parent's), and a planted bug (D's scale: dS = P (dP - 2 D)).
B=${QATTN:-/work/main/build/qattn}
gen() { name=$1; shift; $B plan --backward --gpu h100 --head-dim 64 --name d64_${name} "$@" --print | sed -n '/^Kernel/,$p' > at_$name.tl; }
gen causal --heads 32 --mask causal; gen none --heads 32 --mask none; gen gqa --heads 32/8 --mask causal
gen softcap --heads 32 --mask none --softcap 30; gen doc --heads 32 --mask causal --document true
gen window --heads 32 --window 100,0; gen det --heads 32/8 --mask causal --deterministic true
for m in causal none; do sed 's/ {at_use}//; s/d64_'$m'/d64_'$m'_base/' at_$m.tl > base_$m.tl; done
sed 's/^  Compute Subtract dPt, D^T and get dSt$/  Compute Multiply D, 2.0\n  Compute Subtract dPt, D^T and get dSt/; s/d64_causal/d64_neg_d_scale/' at_causal.tl > neg_d_scale.tl
