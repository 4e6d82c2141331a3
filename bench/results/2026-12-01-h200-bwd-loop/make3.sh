#!/usr/bin/env bash
# The translation units of run5.sh (out/loop3), on the CPU machine, after make2.sh: this tree's unit of
# each config (_n) and make_var2.py's variants of it.
#     bash bench/results/2026-12-01-h200-bwd-loop/make3.sh
set -euo pipefail
H=$(dirname "$0")
mkdir -p out/loop3
for n in c128 n128 gqa128 c64; do
  cp "out/loop2/${n}_n.cu" "out/loop3/${n}_n.cu"; cp "out/loop2/${n}_n.flags" "out/loop3/${n}_n.flags"
  python3 "$H/make_var2.py" "out/loop3/${n}_n.cu" "out/loop3/$n"
done
