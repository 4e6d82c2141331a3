#!/usr/bin/env bash
# The translation units of run7.sh (out/loop4), on the CPU machine, after make2.sh: this tree's unit of
# each config (_n) and the same with the dQ stage's stores in the XOR2 order (_x: stage_acc's XOR2, an
# odd row's thread storing block blk ^ 2; no bank conflicts, checked by host_layout_check).
#     (on 79a2218, before the lowering emitted the d64 form itself) git apply bench/results/2026-12-01-h200-bwd-loop/xor2.patch && bash bench/results/2026-12-01-h200-bwd-loop/make4.sh
set -euo pipefail
mkdir -p out/loop4
for n in c128 n128 gqa128 ngqa128 c64 gqa64; do
  cp "out/loop2/${n}_n.cu" "out/loop4/${n}_n.cu"; cp "out/loop2/${n}_n.flags" "out/loop4/${n}_n.flags"; cp "out/loop2/${n}_n.flags" "out/loop4/${n}_x.flags"
  sed -E 's/add_acc_global_tma<([0-9]+), ([0-9]+), true, true>\(/add_acc_global_tma<\1, \2, true, true, true>(/' "out/loop2/${n}_n.cu" > "out/loop4/${n}_x.cu"
  ! cmp -s "out/loop4/${n}_n.cu" "out/loop4/${n}_x.cu" || { echo "$n: no TMA addition to edit"; exit 1; }
done
