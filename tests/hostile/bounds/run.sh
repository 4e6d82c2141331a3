#!/usr/bin/env bash
# Hostile inputs that ask for unbounded memory (issue 18, "Bounds"): every one must end in a coded
# diagnostic and exit 1, never in std::bad_alloc / abort (exit 134) and never by holding gigabytes.
# Usage: run.sh path/to/qattn. Outside a sanitizer run (ASAN_OPTIONS unset) the address space is
# limited to 4 GiB, so a regression aborts here instead of taking the machine's memory.
set -uo pipefail
Q=$1
D=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
[ -z "${ASAN_OPTIONS:-}" ] && ulimit -v $((4 << 20))
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
# expect NAME RC PATTERN -- CMD...: CMD exits with RC and its output matches PATTERN
expect() {
  local name=$1 rc=$2 pat=$3; shift 4
  local out; out=$("$@" 2>&1); local got=$?
  if [ "$got" -eq "$rc" ] && grep -qE -- "$pat" <<<"$out"; then ok "$name"; else bad "$name (rc $got, want $rc /$pat/)"; echo "$out" | tail -20; fi
}
DIMS=batch=1,heads_q=1,heads_kv=1,seqlen_q=64,seqlen_k=64,d=32

# The interpreter's memory budget (1 GiB by default): TL0906 at the statement, with a hint.
expect "64 register buffers of 2^24: TL0906 at the 8th" 1 "many_buffers.tl:[0-9]+:[0-9]+: error TL0906.*register buffer 'X7'" -- \
  "$Q" tl run "$D/many_buffers.tl" --dims $DIMS
expect "the budget's hint" 1 "hint: .*--max-memory" -- "$Q" tl run "$D/many_buffers.tl" --dims $DIMS
expect "shared buffers sized by a huge Const: TL0906" 1 "const_dims.tl:[0-9]+:[0-9]+: error TL0906.*shared buffer 'Y7'" -- \
  "$Q" tl run "$D/const_dims.tl" --dims $DIMS
expect "24 nested loops of 128 MiB buffers: TL0906" 1 "nested_loops.tl:[0-9]+:[0-9]+: error TL0906" -- \
  "$Q" tl run "$D/nested_loops.tl" --dims $DIMS
expect "an outer-product GEMM of 7 GB: refused" 1 "gemm_outer.tl:[0-9]+:[0-9]+: error TL090[26].*GEMM result" -- \
  "$Q" tl run "$D/gemm_outer.tl" --dims $DIMS
expect "a larger budget lets 64 buffers pass the 8th" 1 "error TL0906.*'X(1[0-9]|[2-9][0-9])'" -- \
  "$Q" tl run "$D/many_buffers.tl" --dims $DIMS --max-memory 2000
expect "a budget of 1 MiB stops a golden program at its globals" 1 "mha.tl:5:1: error TL0906.*global tensors" -- \
  "$Q" tl run "$D/../../tl/mha.tl" --dims batch=2,heads_q=3,heads_kv=3,seqlen_q=77,seqlen_k=130,d=32 --max-memory 1
expect "the golden program passes within the default budget" 0 "^PASS" -- \
  "$Q" tl run "$D/../../tl/mha.tl" --dims batch=2,heads_q=3,heads_kv=3,seqlen_q=77,seqlen_k=130,d=32
expect "--max-memory 0 is a usage error" 2 "CLI0002" -- "$Q" tl run "$D/../../tl/mha.tl" --dims $DIMS --max-memory 0

# Input size caps: TL and spec files 1 MiB; reading stops past the cap (/dev/zero never ends).
{ cat "$D/../../tl/mha.tl"; head -c $((1 << 20)) /dev/zero | tr '\0' '\n'; } > "$T/big.tl"
expect "a 1 MiB+ TL file: IO0003" 1 "IO0003.*larger than 1 MiB" -- "$Q" tl check "$T/big.tl"
expect "/dev/zero as TL: IO0003" 1 "IO0003" -- "$Q" tl check /dev/zero
{ printf '{"name": "x", "heads_q": 8, "head_dim": 64'; head -c $((1 << 20)) /dev/zero | tr '\0' ' '; printf '}'; } > "$T/big.json"
expect "a 1 MiB+ spec: SPEC0112" 1 "SPEC0112.*over the limit of 1 MiB" -- "$Q" spec show --spec "$T/big.json"
expect "/dev/zero as a spec: SPEC0112" 1 "SPEC0112" -- "$Q" spec show --spec /dev/zero

# Memory actually held (peak RSS), where GNU time is installed: well under the 1 GiB budget plus
# the process itself.
if [ -x /usr/bin/time ] && [ -z "${ASAN_OPTIONS:-}" ]; then
  for f in many_buffers const_dims nested_loops gemm_outer; do
    /usr/bin/time -f "%M" -o "$T/rss" "$Q" tl run "$D/$f.tl" --dims $DIMS >/dev/null 2>&1
    kb=$(tail -1 "$T/rss")
    echo "     $f.tl: peak RSS $((kb / 1024)) MiB"
    [ "$kb" -lt $((1300 * 1024)) ] && ok "$f.tl stays under 1.3 GiB" || bad "$f.tl peak RSS $kb KiB"
  done
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
