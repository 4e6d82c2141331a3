#!/usr/bin/env bash
# The units of run9.sh (out/pred), on the CPU machine at 2362724 (XOR2 at d64): this tree's units (base/)
# and the same compiled against a device runtime with pred2.patch (var/ and var/device): every fp32
# stage store issued twice, predicated on the row's parity (rows 0, 2, 4, 6 of a warp, then 1, 3, 5, 7:
# no bank conflicts, no data selects) wherever the unit asks for XOR2; the d128 units ask for it too.
#     bash bench/results/2026-12-01-h200-bwd-loop/make5.sh
set -euo pipefail
D=bench/results/2026-12-01-h200-bwd-loop
bash $D/make2.sh > /dev/null
rm -rf out/pred && mkdir -p out/pred/base out/pred/var
cp -r device out/pred/var/device
patch -s -d out/pred/var -p1 < $D/pred2.patch
for n in c128 n128 gqa128 ngqa128 c64 gqa64; do
  cp "out/loop2/${n}_n.cu" "out/pred/base/${n}_b.cu"; cp "out/loop2/${n}_n.flags" "out/pred/base/${n}_b.flags"
  sed -E 's/add_acc_global_tma<([0-9]+), ([0-9]+), true, true>\(/add_acc_global_tma<\1, \2, true, true, true>(/' "out/loop2/${n}_n.cu" > "out/pred/var/${n}_v.cu"
  cp "out/loop2/${n}_n.flags" "out/pred/var/${n}_v.flags"
  grep -q "true, true, true>(" "out/pred/var/${n}_v.cu" || { echo "$n: no stage to edit"; exit 1; }
done
