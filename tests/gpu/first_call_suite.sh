#!/usr/bin/env bash
# Issue 21 on a lent H100/H200: the first call of a new variant (qattn against FlexAttention with the
# same functions, bench/bench_first_call.py) and where its time goes (`qattn generate` of a new
# variant, its stage lines), with the compiler carried in BIN_DIR (Release, stripped, its Debian
# libraries in BIN_DIR/lib) and CUTLASS's headers in .cutlass/include (out/carry/cutlass.tar.xz).
#   bash tests/gpu/first_call_suite.sh OUT_DIR BIN_DIR [VARIANTS]
# Prints the toolchain the split build uses (the host compiler, the static CUDA runtime).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT=$1; BIN=$2; N=${3:-5}
mkdir -p "$OUT"
[ -d "$ROOT/.cutlass/include/cute" ] || tar -xJf "$ROOT/out/carry/cutlass.tar.xz" -C "$ROOT"
export QATTN_BIN=$BIN/qattn QATTN_HOME=$ROOT QATTN_CUTLASS_INCLUDE=$ROOT/.cutlass/include LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-} \
       PYTHONPATH=$ROOT/python PYTHONUNBUFFERED=1 QATTN_VERBOSE=0
status=0
{ echo "nproc $(nproc)"; command -v g++ c++ nvcc; g++ --version | head -1; nvcc --version | tail -2;
  ls "$(dirname "$(readlink -f "$(command -v nvcc)")")"/../lib64/libcudart_static.a; } > "$OUT/toolchain.txt" 2>&1
cat "$OUT/toolchain.txt"
echo "== where a first build's time goes: qattn generate of a new variant, cold cache == ($SECONDS s)"
C=$(mktemp -d)
/usr/bin/time -f "qattn generate: %e s wall, %U s user" env QATTN_CACHE_DIR=$C/cache "$BIN/qattn" generate --preset llama3-8b --gpu h100 \
  --mask-mod "kv_idx <= q_idx + seqlen_k - seqlen_q and kv_idx % 7 != 3" --out $C/gen --no-verify > "$OUT/generate_cold.log" 2>&1 || status=1
grep -E "nvcc|interpreted|qattn generate|error" "$OUT/generate_cold.log" | cut -c1-160
echo "== first calls: $N new variants, qattn vs FlexAttention, and a kernel from a pack == ($SECONDS s)"
rm -rf "$C/pack"; QATTN_CACHE_DIR=$C/packcache python3 -m qattn.pack build "$C/pack" llama3-8b --gpu h100 > "$OUT/pack_build.log" 2>&1 || status=1
QATTN_CACHE_DIR=$C/bench python3 "$ROOT/bench/bench_first_call.py" "$OUT/first_call.csv" --variants "$N" --pack "$C/pack" \
  > "$OUT/first_call.log" 2>&1 || status=1
tail -3 "$OUT/first_call.log"
rm -rf "$C"
echo "first-call suite done in $SECONDS s"
exit $status
