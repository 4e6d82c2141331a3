#!/usr/bin/env bash
# run5.sh's diagnostic units, after make.sh - make4.sh (CPU machine): doc_hf and ar_doc_hf without the
# document Mask's element loop (`apply_keep` removed: wrong gradients on a document's edge tiles, the
# same visits), stamped per visit.
set -euo pipefail
D=bench/results/2026-12-01-h200-bwd-doc-loads; O=out/docl; TS=bench/results/2026-11-30-h200-bwd-timeline/stamp.py
for u in doc_hf ar_doc_hf; do
  grep -c 'qattn::apply_keep<' $O/$u.cu | grep -qx 1
  grep -v 'qattn::apply_keep<' $O/$u.cu > $O/nk_$u.cu && cp $O/$u.flags $O/nk_$u.flags
  python3 $TS $O/nk_$u.cu $O/st_nk_$u.cu && python3 $D/stamp_iter.py $O/st_nk_$u.cu $O/it_nk_$u.cu && cp $O/$u.flags $O/it_nk_$u.flags
done
