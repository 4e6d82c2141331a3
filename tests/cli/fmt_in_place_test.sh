#!/usr/bin/env bash
# `qattn tl fmt -i` edits the content of a regular file and nothing else (issue 18): a FIFO (as a
# device would be; /dev/null is not tried: a broken build run as root would replace it) or a folder
# is refused (IO0004) and stays what it was, a symlink's target is edited and the link
# stays a link, the file keeps its mode (and, when run as root, its owner).
# Usage: fmt_in_place_test.sh path/to/qattn
set -uo pipefail
Q=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
check() { if eval "$2"; then ok "$1"; else bad "$1 ($2)"; fi; }
UNFORMATTED='kernel k with mask none
dim  batch,seqlen_q
'
CANON=$(printf '%s' "$UNFORMATTED" | "$Q" tl fmt /dev/stdin)

# A FIFO: refused before anything is read (the command would block on it otherwise).
mkfifo "$T/fifo"
out=$(timeout 20 "$Q" tl fmt -i "$T/fifo" 2>&1); rc=$?
check "FIFO refused with IO0004" '[ $rc -eq 1 ] && grep -q "IO0004.*not a regular file" <<<"$out"'
check "FIFO is still a FIFO" '[ -p "$T/fifo" ]'
# A folder: refused.
mkdir "$T/dir"
out=$("$Q" tl fmt -i "$T/dir" 2>&1); rc=$?
check "a folder refused" '[ $rc -eq 1 ] && [ -d "$T/dir" ]'

# Mode: a 0600 file stays 0600 (and a 0640 one 0640), with the formatted content.
printf '%s' "$UNFORMATTED" > "$T/private.tl"
chmod 600 "$T/private.tl"
"$Q" tl fmt -i "$T/private.tl"; rc=$?
check "0600 file formatted" '[ $rc -eq 0 ] && [ "$(cat "$T/private.tl")" = "$CANON" ]'
check "0600 file keeps mode 600" '[ "$(stat -c %a "$T/private.tl")" = 600 ]'
printf '%s' "$UNFORMATTED" > "$T/group.tl"
chmod 640 "$T/group.tl"
"$Q" tl fmt -i "$T/group.tl"
check "0640 file keeps mode 640" '[ "$(stat -c %a "$T/group.tl")" = 640 ]'
# Owner: as root, a file of another user keeps that user.
if [ "$(id -u)" = 0 ]; then
  printf '%s' "$UNFORMATTED" > "$T/owned.tl"
  chown 65534:65534 "$T/owned.tl"
  "$Q" tl fmt -i "$T/owned.tl"
  check "owner and group kept" '[ "$(stat -c %u:%g "$T/owned.tl")" = 65534:65534 ] && [ "$(cat "$T/owned.tl")" = "$CANON" ]'
fi

# A symlink (and a chain of two, one of them relative, into another folder): the target is
# edited, the links stay links to it.
mkdir "$T/real"
printf '%s' "$UNFORMATTED" > "$T/real/prog.tl"
chmod 604 "$T/real/prog.tl"
ln -s "$T/real/prog.tl" "$T/link1.tl"
ln -s link1.tl "$T/link2.tl"
"$Q" tl fmt -i "$T/link2.tl"; rc=$?
check "fmt -i through two symlinks succeeds" '[ $rc -eq 0 ]'
check "the links are still links" '[ -L "$T/link1.tl" ] && [ -L "$T/link2.tl" ] && [ "$(readlink "$T/link2.tl")" = link1.tl ]'
check "the target is formatted" '[ "$(cat "$T/real/prog.tl")" = "$CANON" ]'
check "the target keeps its mode" '[ "$(stat -c %a "$T/real/prog.tl")" = 604 ]'
check "no temporary left beside the target or the link" '[ -z "$(ls -A "$T/real" | grep -v "^prog.tl$")" ] && [ -z "$(ls -A "$T" | grep tmp)" ]'
# A dangling symlink: refused, not created.
ln -s "$T/missing.tl" "$T/dangling.tl"
out=$("$Q" tl fmt -i "$T/dangling.tl" 2>&1); rc=$?
check "a dangling symlink refused" '[ $rc -eq 1 ] && grep -q IO0004 <<<"$out" && [ ! -e "$T/missing.tl" ] && [ -L "$T/dangling.tl" ]'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
