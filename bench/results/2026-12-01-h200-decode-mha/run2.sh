#!/usr/bin/env bash
# Second device call (carried: out/carry, out/gpu-py = this tree): is the MHA rows' paged loss the pages'
# order? The same rows over pages laid out in order (--ordered-pages: page i of a sequence next to page
# i + 1) against the shuffled pool of run.sh, GQA as the control.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
R=mha_32_32_b8_4k,mha_32_32_b32_8k,gqa_32_8_b32_8k
timeout 150 python3 bench/bench_kvcache.py "$OUT/ordered.csv" --rounds 9 --pages 0,16,64 --rows $R --ordered-pages > "$OUT/ordered.txt" 2>&1
echo "ordered exit $? at $SECONDS s"; cat "$OUT/ordered.txt"
timeout 150 python3 bench/bench_kvcache.py "$OUT/shuffled.csv" --rounds 9 --pages 0,16,64 --rows $R > "$OUT/shuffled.txt" 2>&1
echo "shuffled exit $? at $SECONDS s"; cat "$OUT/shuffled.txt"
