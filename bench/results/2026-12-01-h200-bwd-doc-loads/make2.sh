#!/usr/bin/env bash
# run2.sh's units, after make.sh (CPU machine): doc_n and the stamped units (../2026-11-30-h200-bwd-timeline/stamp.py)
set -euo pipefail
D=bench/results/2026-12-01-h200-bwd-doc-loads; O=out/docl
python3 $D/make_var.py $O/doc_p.cu $O/doc_n.cu n && cp $O/doc_p.flags $O/doc_n.flags
for u in doc_p doc_h c_p; do
  python3 bench/results/2026-11-30-h200-bwd-timeline/stamp.py $O/$u.cu $O/st_$u.cu && cp $O/$u.flags $O/st_$u.flags
done
