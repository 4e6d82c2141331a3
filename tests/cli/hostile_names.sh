#!/usr/bin/env bash
# Issue 18, names, through the `qattn` command. Usage: hostile_names.sh path/to/qattn
#  - a spec whose name is a path, holds a line break or a quote, ... (tests/hostile/names/name_*.json)
#    is refused with SPEC0217 and nothing is written, inside or outside the working folder;
set -uo pipefail
Q=$(realpath "$1")
H=$(cd "$(dirname "$0")/../hostile/names" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
expect() {  # expect NAME RC PATTERN -- CMD...
  local name=$1 rc=$2 pat=$3; shift 4
  local out; out=$("$@" 2>&1); local got=$?
  if [ "$got" -eq "$rc" ] && grep -qE -- "$pat" <<<"$out"; then ok "$name"; else bad "$name (rc $got, want $rc /$pat/)"; echo "$out" | head -20; fi
}
nothing_new() {  # nothing_new NAME: $T holds only work/ and home/, both empty but for work/sub
  local extra; extra=$(cd "$T" && find . -mindepth 1 ! -path ./work ! -path ./work/sub ! -path ./home | head -5)
  if [ -z "$extra" ]; then ok "$1: nothing written"; else bad "$1: wrote $extra"; fi
}
mkdir -p "$T/work/sub" "$T/home"
cd "$T/work/sub" || exit 1
export HOME=$T/home

for f in "$H"/name_*.json; do
  n=$(basename "$f" .json)
  expect "$n refused" 1 "SPEC0217.*name.*A-Z a-z 0-9" -- "$Q" plan --spec "$f"
  nothing_new "$n"
  expect "$n refused by sketch" 1 "SPEC0217" -- "$Q" sketch --spec "$f" --out "$T/work/sub/s"
  nothing_new "$n (sketch)"
done
expect "--name with a path refused" 1 "SPEC0217.*does not start with a letter" -- "$Q" plan --preset llama3-8b --gpu a100 --name ../../up
expect "--name with a quote refused" 1 "SPEC0217.*contains '''" -- "$Q" plan --preset llama3-8b --gpu a100 --name "x';id;'"
nothing_new "--name"
expect "a safe --name names the folder" 0 "wrote artifacts/my-kernel.v2-a100/" -- "$Q" plan --preset llama3-8b --gpu a100 --name my-kernel.v2
rm -rf "$T/work/sub/artifacts"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
