#!/usr/bin/env bash
# Tile and schedule variants of the sm90 decoding kernel as TL edits (no C++ change): the planner's TL
# for a one-token GQA/MQA spec with LSE (the key split's kernel), with its Const / Role / Grid lines
# rewritten, each translated and compiled, then timed by bench/bench_decode_tiles.py on the split's
# folded launches against the planner's choice, in one process.
#   bash bench/decode_tiles.sh OUT_DIR     (QATTN_BIN, QATTN_TRANSLATE, QATTN_CUTLASS_INCLUDE set)
set -eu
R=${1:?usage: decode_tiles.sh OUT_DIR}
mkdir -p "$R/so"
"$QATTN_BIN" plan --preset llama3-8b --gpu h100 --mask none --seqlen 1/8192 --lse true --out "$R/plan" > /dev/null
base="$R/plan/code.tl"
# name: BM BN WARPS STAGES consumers consumer_regs producer_regs pingpong persistent [L2 promotion]
# (the last field: the K / V loads' L2 promotion of a one-query-tile launch, QATTN_SM90_L2_STREAM in
# device/qattn/sm90/tensor_map.h; empty = the runtime's, 128B; L2_256B = the runtime before it)
variants=(
  "base:128:128:12:2:2:232:40:pingpong:1"
  "bm64:64:128:8:2:1:232:40::1"
  "bm64_s3:64:128:8:3:1:232:40::1"
  "bm64_bn64_s4:64:64:8:4:1:232:40::1"
  "bn64_s4:128:64:12:4:2:232:40:pingpong:1"
  "bn192:128:192:12:2:2:232:40:pingpong:1"
  "bm64_bn192:64:192:8:2:1:232:40::1"
  "nopersist:128:128:12:2:2:240:24:pingpong:0"
  "s3:128:128:12:3:2:232:40:pingpong:1"
  "bn64_s6:128:64:12:6:2:232:40:pingpong:1"
  "bm64_bn64_s6:64:64:8:6:1:232:40::1"
  "l2_256:128:128:12:2:2:232:40:pingpong:1:L2_256B"
  "l2_none:128:128:12:2:2:232:40:pingpong:1:NONE"
  "bm64_s3_l2_256:64:128:8:3:1:232:40::1:L2_256B"
)
for v in "${variants[@]}"; do
  IFS=: read -r name bm bn warps stages cons creg preg pp persist l2 <<< "$v"
  extra=""; [ -n "${l2:-}" ] && extra="-DQATTN_SM90_L2_STREAM=CU_TENSOR_MAP_L2_PROMOTION_$l2"
  tl="$R/so/$name.tl"
  sed -e "s/^Const BM = .*/Const BM = $bm, BN = $bn, WARPS = $warps, STAGES = $stages/" \
      -e "s/^Role producer warpgroups 1 registers .*/Role producer warpgroups 1 registers $preg/" \
      -e "s/^Role consumer warpgroups .*/Role consumer warpgroups $cons registers $creg${pp:+ pingpong}/" "$base" > "$tl"
  [ "$persist" = 1 ] || sed -i -e 's/ {persistent}$//' "$tl"
  if "$QATTN_TRANSLATE" "$tl" --gpu h100 -o "$R/so/$name.cu" > "$R/so/$name.xl.txt" 2>&1; then
    flags=$("$QATTN_TRANSLATE" "$tl" --gpu h100 --flags 2>/dev/null | tail -1)
    # shellcheck disable=SC2086
    (nvcc -shared -Xcompiler -fPIC $flags $extra -I"$QATTN_CUTLASS_INCLUDE" -Idevice -Iinclude -o "$R/so/$name.so" "$R/so/$name.cu" \
      > "$R/so/$name.nvcc.txt" 2>&1 || echo "$name: nvcc failed") &
  else
    echo "$name: not translated: $(grep -m1 error "$R/so/$name.xl.txt")"
  fi
done
wait
ls "$R/so"/*.so
