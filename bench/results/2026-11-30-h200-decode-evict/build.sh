#!/usr/bin/env bash
# Builds the libraries of run.sh on the CPU machine (nvcc 13, .cutlass/include) into out/evict/so: the
# planner's decoding TL (as bench/decode_tiles.sh: llama3-8b, one query, LSE) compiled against device/
# (base.so), against evict.py's copy (evict.so: K / V TMA loads with an L2 evict-first hint), and the
# latter with no L2 promotion of the K / V maps (evict_l2none.so); base_l2none.so the promotion alone.
set -eu
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"; HERE="$(cd "$(dirname "$0")" && pwd)"; OUT=$ROOT/out/evict
rm -rf "$OUT"; mkdir -p "$OUT/so"
python3 "$HERE/evict.py" "$ROOT/device" "$OUT/device"
"$ROOT/build/qattn" plan --preset llama3-8b --gpu h100 --mask none --seqlen 1/8192 --lse true --out "$OUT/plan" > /dev/null
"$ROOT/build/qattn_translate" "$OUT/plan/code.tl" --gpu h100 -o "$OUT/so/k.cu"
flags=$("$ROOT/build/qattn_translate" "$OUT/plan/code.tl" --gpu h100 --flags | tail -1)
none=-DQATTN_SM90_L2_STREAM=CU_TENSOR_MAP_L2_PROMOTION_NONE
build() {  # name device_dir extra...
  local name=$1 dev=$2; shift 2
  # shellcheck disable=SC2086
  nvcc -shared -Xcompiler -fPIC $flags "$@" -I"$ROOT/.cutlass/include" -I"$dev" -I"$ROOT/include" -o "$OUT/so/$name.so" "$OUT/so/k.cu"
}
build base "$ROOT/device" & build evict "$OUT/device" & build evict_l2none "$OUT/device" $none & build base_l2none "$ROOT/device" $none &
wait
cuobjdump -sass "$OUT/so/evict.so" 2>/dev/null | grep -c "UTMALDG" || true
ls -la "$OUT/so"/*.so
