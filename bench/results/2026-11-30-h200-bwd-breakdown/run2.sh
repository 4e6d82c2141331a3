#!/usr/bin/env bash
# Second device call (carried out/carry, out/gpu-py, out/exp):
#  1. the host's share of a backward call: bench/host_backward.py (qattn and cuDNN, calls queued back
#     to back; cProfile of qattn's) for llama2-7b MHA s4096 causal and qwen2.5-72b GQA s2048;
#  2. the document kernel's skip walk: the generated unit (doc_base, main at a584494) against the same
#     unit with 16 tiles' `empty when` clauses a round instead of 4 (doc_nv16), kernel to kernel.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
bash tests/gpu/build_bwd_kernels.sh out/explib --only '^$' -j 8 --cu doc_base=out/exp/doc_base.cu --cu doc_nv16=out/exp/doc_nv16.cu > "$OUT/build.txt" 2>&1
echo "build exit $?" >> "$OUT/build.txt"; grep -E "registers|fail|exit" "$OUT/build.txt"
timeout 120 python3 bench/bench_bwd_ab.py out/explib/doc_base.so out/explib/doc_nv16.so --shapes '4,32,32,4096,4096;8,32,32,2048,2048;1,32,32,16384,16384' \
  --csv "$OUT/doc_ab.csv" > "$OUT/doc_ab.txt" 2>&1; echo "ab exit $?" >> "$OUT/doc_ab.txt"; cat "$OUT/doc_ab.txt"
( timeout 150 python3 bench/host_backward.py --config llama2-7b-mha --seqlen 4096 --causal
  timeout 150 python3 bench/host_backward.py --config qwen2.5-72b-gqa --seqlen 2048 --top 12 ) > "$OUT/host.txt" 2>&1
echo "host exit $?" >> "$OUT/host.txt"; head -60 "$OUT/host.txt"
