#!/usr/bin/env bash
# Call 4: the prefill kernels (which never stream K / V: the hint's branch is not taken) against their
# parent: out/pab/A_{causal,none} = `qattn generate --preset llama3-8b --mask M` by main at 868152d
# (QATTN_HOME at its device/, include/, data/), B_* by this tree; bench/bench_ab.py in one process.
set -u
for m in causal none; do
  PYTHONPATH=$PWD/python timeout 250 python3 bench/bench_ab.py out/pab/A_$m out/pab/B_$m --shapes 4x4096,16x1024,1x16384,8x2048,32x512 \
    --heads 32/8 --rounds 9 --out $OUT/prefill_ab_$m.csv 2>&1 | tee -a $OUT/prefill_ab.txt
done
