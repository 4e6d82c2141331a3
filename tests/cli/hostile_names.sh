#!/usr/bin/env bash
# Issue 18, names and output folders, through the `qattn` command. Usage: hostile_names.sh path/to/qattn
#  - a spec whose name is a path, holds a line break or a quote, ... (tests/hostile/names/name_*.json)
#    is refused with SPEC0217 and nothing is written, inside or outside the working folder;
#  - system folders, $HOME and folders qattn did not write are refused as --out (OUT0101/OUT0103);
#  - a reused --out ends with only the new run's files (no older kernel.cu beside a new spec).
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

# Output folders.
expect "--out / refused" 1 "OUT0101.*system folder" -- "$Q" plan --preset llama3-8b --gpu a100 --out /
# refused before any work: no stage runs (plan and sketch check --out first, as generate does)
out=$("$Q" plan --preset llama3-8b --gpu a100 --out / 2>&1)
if grep -q "stage 1a" <<<"$out"; then bad "--out / refused before planning"; echo "$out" | head -5; else ok "--out / refused before planning"; fi
expect "--out /usr refused" 1 "OUT0101" -- "$Q" plan --preset llama3-8b --gpu a100 --out /usr
expect "--out /etc/ refused (sketch)" 1 "OUT0101" -- "$Q" sketch --preset llama3-8b --gpu a100 --out /etc/
expect "--out \$HOME refused" 1 "OUT0101.*home folder" -- "$Q" plan --preset llama3-8b --gpu a100 --out "$HOME"
nothing_new "system folders"
mkdir -p "$T/work/mine" && echo keep > "$T/work/mine/notes.txt"
expect "--out with foreign files refused" 1 "OUT0103.*notes.txt" -- "$Q" plan --preset llama3-8b --gpu a100 --out "$T/work/mine"
if [ "$(ls -A "$T/work/mine")" = "notes.txt" ]; then ok "foreign folder untouched"; else bad "foreign folder changed: $(ls -A "$T/work/mine")"; fi
expect "--out . (the working folder, not qattn's) refused" 1 "OUT0103" -- "$Q" plan --preset llama3-8b --gpu a100 --out "$T/work"

# A reused --out: an older run's kernel.cu and library beside a new spec must not survive.
R=$T/work/reused
mkdir -p "$R" && echo "// old kernel" > "$R/kernel.cu" && echo old > "$R/libqattn_kernel.so"
expect "plan into a reused --out" 0 "wrote" -- "$Q" plan --preset llama3-8b --gpu a100 --out "$R"
got=$(cd "$R" && ls -A | sort | tr '\n' ' ')
if [ "$got" = ".qattn-artifacts code.tl plan.md sketch.tl spec.json " ]; then ok "reused --out holds only the new set"; else bad "reused --out holds: $got"; fi
expect "plan again into its own folder" 0 "wrote" -- "$Q" plan --preset gemma-7b --gpu a100 --out "$R"
if grep -q '"gemma-7b"' "$R/spec.json"; then ok "replaced whole by the second run"; else bad "spec.json not replaced"; fi
left=$(find "$T/work" -maxdepth 1 -name '.*tmp-*' | head -3)
if [ -z "$left" ]; then ok "no temporary folder left"; else bad "temporary folders left: $left"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
