#!/usr/bin/env bash
# The combine's loads and parts loop against a parent (bench/results/2026-11-29-h200-combine-loads):
# the planner's decoding combine TL (`{unroll: 16}` now; `{unroll: 8}` in the parent) and its 4-row
# TL for long query sequences, each translated by the parent's translator and compiled against the
# parent's device runtime (old_*), translated by the parent's translator against this runtime
# (new_u8: the branch-free loads alone), and translated and compiled by this tree (casc8, casc16:
# the loop in blocks as well; new_bm4). Then on a GPU:
#   python3 bench/bench_combine.py OUT.csv old_u8=OUT/old_u8.so new_u8=OUT/new_u8.so casc8=OUT/casc8.so \
#     casc16=OUT/casc16.so old_bm4=OUT/old_bm4.so new_bm4=OUT/new_bm4.so
#   python3 tests/gpu/combine_check.py --libs OUT/casc8.so OUT/casc16.so
# Usage: bash bench/combine_loads_ab.sh OUT_DIR PARENT_ROOT [BUILD_DIR]
#   PARENT_ROOT: a checkout of the parent commit with its qattn_translate built in PARENT_ROOT/build
#   (e.g. git worktree add /tmp/parent <commit> && (cd /tmp/parent && bash scripts/build.sh)).
set -euo pipefail
OUT=${1:?usage: combine_loads_ab.sh OUT_DIR PARENT_ROOT [BUILD_DIR]}
PARENT=${2:?usage: combine_loads_ab.sh OUT_DIR PARENT_ROOT [BUILD_DIR]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${3:-$ROOT/build}
mkdir -p "$OUT"
rm -f "$OUT"/*.so  # no stale library from an earlier run
"$B/qattn" plan --preset llama3-8b --gpu h200 --seqlen 1/65536 --combine --print 2>/dev/null > "$OUT/decode.tl"
"$B/qattn" plan --preset llama3-8b --gpu h200 --seqlen 4096/4096 --combine --print 2>/dev/null > "$OUT/long.tl"
sed 's/{unroll: 16}/{unroll: 8}/' "$OUT/decode.tl" > "$OUT/decode8.tl"
flags=$("$B/qattn_translate" "$OUT/decode.tl" --gpu h200 --flags)
build() {  # NAME TRANSLATE_DIR DEVICE_ROOT TL
  "$2/qattn_translate" "$4" --gpu h200 -o "$OUT/$1.cu"
  # shellcheck disable=SC2086
  nvcc $flags -Xcompiler -fPIC -shared -I "$3/include" -I "$3/device" -diag-suppress 177 -o "$OUT/$1.so" "$OUT/$1.cu"
}
pids=()
build old_u8 "$PARENT/build" "$PARENT" "$OUT/decode8.tl" & pids+=($!)
build new_u8 "$PARENT/build" "$ROOT" "$OUT/decode8.tl" & pids+=($!)
build casc8 "$B" "$ROOT" "$OUT/decode8.tl" & pids+=($!)
build casc16 "$B" "$ROOT" "$OUT/decode.tl" & pids+=($!)
build old_bm4 "$PARENT/build" "$PARENT" "$OUT/long.tl" & pids+=($!)
build new_bm4 "$B" "$ROOT" "$OUT/long.tl" & pids+=($!)
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done  # a background build's failure is not seen by set -e
[ "$failed" = 0 ] || { echo "combine_loads_ab.sh: a library failed to build (above)" >&2; exit 1; }
ls "$OUT"/*.so
