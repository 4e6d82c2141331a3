#!/usr/bin/env bash
# The K / V loads' L2 promotion of one-query-tile launches (device/qattn/sm90/tensor_map.h,
# QATTN_SM90_L2_STREAM: 128 bytes) against the previous 256 bytes everywhere, on a lent H100/H200,
# in one process per comparison:
#   1. the sweep kernels of tests/gpu/build_kernels.sh built twice: with this tree's device runtime
#      (qattn) and with a copy whose QATTN_SM90_L2_STREAM is 256 bytes (old_*); numerics of both
#   2. the 84-row Hopper sweep, qattn against old (and cuDNN, FA2): bench/bench_sm90.py --also old=
#   3. the decoding rows through the package (bench/bench_kvcache.py: contiguous and paged caches,
#      cuDNN, the copy bandwidth), this tree's runtime
# Usage: tests/gpu/l2_promotion_ab.sh OUT_DIR BIN_DIR   (BIN_DIR: qattn, qattn_translate, lib/)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT=$1; BIN=$2
mkdir -p "$OUT"
[ -d "$ROOT/.cutlass/include/cute" ] || tar -xJf "$ROOT/out/carry/cutlass.tar.xz" -C "$ROOT"
export QATTN_BIN=$BIN/qattn QATTN_HOME=$ROOT QATTN_CUTLASS_INCLUDE=$ROOT/.cutlass/include LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-} \
       PYTHONPATH=$ROOT/python PYTHONUNBUFFERED=1 QATTN_VERBOSE=0 QATTN_CACHE_DIR=/tmp/qattn_l2_cache
CUT=$ROOT/.cutlass/include
K=/tmp/qattn_l2; OLDDEV=/tmp/qattn_l2_dev256
rm -rf "$K" "$K.old" "$OLDDEV"; cp -r "$ROOT/device" "$OLDDEV"
sed -i 's/^#define QATTN_SM90_L2_STREAM .*/#define QATTN_SM90_L2_STREAM CU_TENSOR_MAP_L2_PROMOTION_L2_256B/' "$OLDDEV/qattn/sm90/tensor_map.h"
grep -q "PROMOTION_L2_256B$" "$OLDDEV/qattn/sm90/tensor_map.h" || { echo "the old runtime's promotion was not set"; exit 1; }
status=0
only='^sm90_(d64|d128|d256|mla)_(causal|none)(_lse)?$'
echo "== 1. build: one-tile K / V promotion 128 B (this tree) and 256 B (old_*) == ($SECONDS s)"
bash "$ROOT/tests/gpu/build_kernels.sh" "$K" --run-sm 90 --bin "$BIN" --cutlass "$CUT" -j 8 --only "$only" > "$OUT/build_new.txt" 2>&1 || status=1 &
bash "$ROOT/tests/gpu/build_kernels.sh" "$K.old" --run-sm 90 --bin "$BIN" --device "$OLDDEV" --cutlass "$CUT" -j 8 --only "$only" \
  > "$OUT/build_old.txt" 2>&1 || status=1 &
wait
for f in "$K.old"/*.so; do cp "$f" "$K/old_$(basename "$f")"; done
python3 "$ROOT/tests/gpu/verify.py" "$K" --only '^(old_)?sm90' > "$OUT/verify.txt" 2>&1 || status=1
grep -E "FAIL|passed" "$OUT/verify.txt" | tail -4
echo "== 2. the sweep: qattn vs old (prefill: many query tiles, both 256 B: must match), cuDNN, FA2 == ($SECONDS s)"
python3 "$ROOT/bench/bench_sm90.py" "$K" --out "$OUT" --also 'old=^old_sm90_(d\d+|mla)_(causal|none)(_lse)?\.so$' \
  > "$OUT/bench_sweep.log" 2>&1 || status=1
tail -7 "$OUT/bench_sweep.log"
echo "== 3. the decoding kernel alone: TL tile variants, this runtime and the previous one (l2_256) == ($SECONDS s)"
QATTN_TRANSLATE=$BIN/qattn_translate bash "$ROOT/bench/decode_tiles.sh" /tmp/qattn_l2_dt > "$OUT/decode_tiles_build.txt" 2>&1 || status=1
python3 "$ROOT/bench/bench_decode_tiles.py" /tmp/qattn_l2_dt/so "$OUT/decode_tiles.csv" > "$OUT/decode_tiles.txt" 2>&1 || status=1
tail -6 "$OUT/decode_tiles.txt" | cut -c1-400
echo "== 4. decoding through the package (this tree's runtime) == ($SECONDS s)"
python3 "$ROOT/bench/bench_kvcache.py" "$OUT/decode.csv" --rounds 7 > "$OUT/decode.txt" 2>&1 || status=1
tail -7 "$OUT/decode.txt" | cut -c1-400
echo "done in $SECONDS s"
exit $status
