#!/usr/bin/env bash
# run4.sh's units, after make.sh - make3.sh (CPU machine): the diagnostic ar_* units (make_arith.py: the
# fixed layout's ids computed, no loads) and the stamped heads-first unit.
set -euo pipefail
D=bench/results/2026-12-01-h200-bwd-doc-loads; O=out/docl; TS=bench/results/2026-11-30-h200-bwd-timeline/stamp.py
for u in doc_h doc_hf; do python3 $D/make_arith.py $O/$u.cu $O/ar_$u.cu && cp $O/$u.flags $O/ar_$u.flags; done
for u in ar_doc_h doc_hf; do
  python3 $TS $O/$u.cu $O/st_$u.cu && python3 $D/stamp_iter.py $O/st_$u.cu $O/it_$u.cu && cp $O/$u.flags $O/it_$u.flags
done
