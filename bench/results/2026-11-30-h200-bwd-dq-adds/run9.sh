#!/usr/bin/env bash
# Ninth call: where nodq's 550 M fewer executed instructions come from: Nsight Compute's executed
# instructions per opcode (with the opcode names) of par / new / nodq, d128 causal. (The cuobjdump step
# found no function of that name: the kernel's symbol is mangled; its output was not kept.)
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
L=out/v4ab/lib
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' --cu par_d128_causal=out/v4ab/par_d128_causal.cu --cu new_d128_causal=out/v4ab/new_d128_causal.cu \
  --cu nodq_d128_causal=out/dqb/nodq_causal.cu -j 3 > "$OUT/build9.txt" 2>&1; cat "$OUT/build9.txt"
for v in par new nodq; do cuobjdump -sass -fun flash_bwd_llama3_8b_sm90 $L/${v}_d128_causal.so > "$OUT/sass_$v.txt" 2>&1 || cuobjdump -sass $L/${v}_d128_causal.so > "$OUT/sass_$v.txt" 2>&1; wc -l "$OUT/sass_$v.txt"; done
timeout 120 ncu --metrics sass__inst_executed_per_opcode --print-metric-instances details -k 'regex:flash_bwd_llama3_8b_sm90$' \
  python3 tests/gpu/profile_bwd.py --no-cudnn $L/{par,new,nodq}_d128_causal.so > "$OUT/ncu9.txt" 2>&1
echo "ncu exit $?" >> "$OUT/ncu9.txt"; grep -E "per_opcode|exit" "$OUT/ncu9.txt" | cut -c1-300
