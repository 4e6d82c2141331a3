#!/usr/bin/env bash
# The backward units of run1.sh that the device's build_bwd_kernels.sh does not plan itself (out/widev),
# on the CPU machine: the sm80 form of V wider than Q, K (as PTX for compute_80, so the H200 runs it),
# and the Hopper natural form on mma.sync (`--bwd-form natural-mma`, what d_qk != d_v took before this
# change) of 64 / 128 and 128 / 64 against which the transposed form is timed.
#     bash bench/results/2026-12-01-h200-wide-v/make.sh
set -euo pipefail
B=${BIN:-build}; T=$(mktemp -d)
mkdir -p out/widev
for cfg in "a100_widev_64_128_causal|a100|--preset llama3-8b --head-dim 64,128" \
           "a100_widev_128_256_none|a100|--preset llama2-7b --head-dim 128,256 --mask none" \
           "nat_widev_64_128_causal|h100|--preset llama3-8b --head-dim 64,128 --bwd-form natural-mma" \
           "nat_narrowv_128_64_causal|h100|--preset llama3-8b --head-dim 128,64 --bwd-form natural-mma"; do
  IFS='|' read -r n gpu f <<< "$cfg"
  # shellcheck disable=SC2086
  "$B/qattn" plan --backward $f --gpu "$gpu" --out "$T/$n" > "$T/$n.log" 2>&1 || { cat "$T/$n.log"; exit 1; }
  "$B/qattn_translate" "$T/$n/code.tl" --gpu "$gpu" -o "out/widev/$n.cu"
  "$B/qattn_translate" "$T/$n/code.tl" --gpu "$gpu" --flags | sed 's/code=sm_80/code=[sm_80,compute_80]/' > "out/widev/$n.flags"
  grep -m1 "^# tiles" "$T/$n/code.tl" | cut -c1-160
done
rm -rf "$T"
