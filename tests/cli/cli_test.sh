#!/usr/bin/env bash
# End-to-end tests of the `qattn` command: exit codes, diagnostics with codes and locations, and
# no half-written artifacts when a request is refused. Usage: cli_test.sh path/to/qattn
set -uo pipefail
Q=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
# expect NAME RC PATTERN -- CMD...: CMD exits with RC and its output matches PATTERN
expect() {
  local name=$1 rc=$2 pat=$3; shift 4
  local out; out=$("$@" 2>&1); local got=$?
  if [ "$got" -eq "$rc" ] && grep -qE -- "$pat" <<<"$out"; then ok "$name"; else bad "$name (rc $got, want $rc /$pat/)"; echo "$out" | head -20; fi
}

expect "plan writes four verified files" 0 "wrote" -- $Q plan --preset llama3-8b --gpu a100 --out "$T/ok"
for f in spec.json sketch.tl code.tl plan.md; do [ -s "$T/ok/$f" ] && ok "artifact $f" || bad "artifact $f missing"; done
expect "code.tl passes the checker" 0 "ok" -- $Q tl check "$T/ok/code.tl"
expect "code.tl is canonical" 0 "" -- $Q tl fmt --check "$T/ok/code.tl"
expect "code.tl interprets to the reference (fp64)" 0 "^PASS" -- $Q tl run "$T/ok/code.tl" --dims batch=2,heads_q=4,heads_kv=2,seqlen_q=150,seqlen_k=201 --precision fp64
expect "code.tl interprets to the reference (storage)" 0 "^PASS" -- $Q tl run "$T/ok/code.tl" --dims batch=1,heads_q=2,heads_kv=1,seqlen_q=77,seqlen_k=140
expect "sketch prints" 0 "Compute GEMM Q, K\^T and get S" -- $Q sketch --preset deepseek-v3-mla-prefill --gpu h100

expect "fp8 on A100 refused" 1 "SPEC0231" -- $Q plan --preset llama2-7b --dtype fp8_e4m3 --gpu a100 --out "$T/fp8"
[ ! -e "$T/fp8" ] && ok "fp8 on A100 wrote nothing" || bad "fp8 on A100 left files"
expect "head dim 512 on T4 refused" 1 "PLAN0101.*shared memory" -- $Q plan --preset llama2-7b --dtype fp16 --head-dim 512 --gpu t4 --out "$T/d512"
[ ! -e "$T/d512" ] && ok "head dim 512 wrote nothing" || bad "head dim 512 left files"
expect "bf16 on T4 names fp16" 1 "SPEC0230.*fp16" -- $Q plan --preset llama2-7b --gpu t4 --out "$T/t4"
expect "unknown preset" 1 "SPEC0110" -- $Q plan --preset llama9 --gpu h100
expect "unknown gpu" 1 "HW0201" -- $Q plan --preset llama2-7b --gpu h900
expect "tiles that do not fit" 1 "PLAN0102" -- $Q plan --preset gemma-7b --gpu a100 --tiles 128,256,4,2

printf 'Kernel k with mask none\nDim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d\nCopy Q (64, d) in coordinate [0, 0] from global to shared\n' > "$T/bad.tl"
expect "bad TL: code and location" 1 "bad.tl:3:[0-9]+: error TL03" -- $Q tl check "$T/bad.tl"
printf 'Kernel k with mask none\nfor j = 0: 4\n  Copy Q from\n' > "$T/syntax.tl"
expect "syntax errors: several reported" 1 "syntax.tl:3:.*TL02" -- $Q tl check "$T/syntax.tl"
expect "fmt refuses broken TL" 1 "not formatted" -- $Q tl fmt "$T/syntax.tl"
expect "missing file" 1 "IO0001" -- $Q tl check "$T/nope.tl"
expect "bad --dims is a usage error" 2 "CLI0001" -- $Q tl run "$T/ok/code.tl" --dims seqlen_q
expect "missing dims named" 1 "TL0904" -- $Q tl run "$T/ok/code.tl" --dims batch=1
# the launch arguments of `tl run` (window_left, window_right, softcap): hostile values are diagnostics
D=batch=1,heads_q=2,heads_kv=1,seqlen_q=77,seqlen_k=140
expect "--window below -1 is a usage error" 2 "CLI0002" -- $Q tl run "$T/ok/code.tl" --dims $D --window -5,0
expect "--window not L,R is a usage error" 2 "CLI0002" -- $Q tl run "$T/ok/code.tl" --dims $D --window '1,2;rm'
expect "--window past 2^30 is a usage error" 2 "CLI0002" -- $Q tl run "$T/ok/code.tl" --dims $D --window 99999999999,0
expect "--softcap 0 is a run error" 1 "TL0904" -- $Q tl run "$T/ok/code.tl" --dims $D --softcap 0
expect "--softcap nan is a run error" 1 "TL0904" -- $Q tl run "$T/ok/code.tl" --dims $D --softcap nan
expect "an unbounded window side runs" 0 "^PASS" -- $Q tl run "$(cd "$(dirname "$0")/../.." && pwd)/tests/tl/window_runtime.tl" --dims $D,d=16 --window -1,3
# the combine step (--combine): verified, interpreted, formatted; two kernels at once and the LLM stages refused
expect "plan --combine writes verified files" 0 "wrote" -- $Q plan --preset llama3-8b --gpu h100 --combine --seqlen 1/8192 --out "$T/comb"
expect "the combine's code.tl is canonical" 0 "" -- $Q tl fmt --check "$T/comb/code.tl"
expect "the combine interprets to the merge" 0 "^PASS" -- $Q tl run "$T/comb/code.tl" --dims batch=2,heads_q=3,seqlen_q=5,splits=7
expect "the combine without splits is a run error" 1 "TL0904" -- $Q tl run "$T/comb/code.tl" --dims batch=2,heads_q=3,seqlen_q=5
expect "--backward with --combine refused" 1 "CLI0005" -- $Q plan --preset llama3-8b --gpu h100 --combine --backward --out "$T/both"
[ ! -e "$T/both" ] && ok "--backward with --combine wrote nothing" || bad "--backward with --combine left files"
expect "--bwd-form transposed is the sm90 default" 0 "Compute GEMM K, Q\^T and get St" -- $Q plan --preset llama3-8b --gpu h100 --backward --print
expect "--bwd-form natural plans S = Q K^T" 0 "Compute GEMM Q, K\^T and get S" -- $Q plan --preset llama3-8b --gpu h100 --backward --bwd-form natural --print
expect "--bwd-form natural at d256 on sm90 is the natural form on wgmma" 0 "natural form on wgmma: BM=64, BN=64" -- $Q plan --preset llama3-8b --head-dim 256 --gpu h100 --backward --bwd-form natural --print
expect "--bwd-form natural-mma keeps mma.sync's layouts" 0 "warps_m: 2" -- $Q plan --preset llama3-8b --head-dim 256 --gpu h100 --backward --bwd-form natural-mma --print
expect "--bwd-form with a hostile value refused" 1 "CLI0005" -- $Q plan --preset llama3-8b --gpu h100 --backward --bwd-form 'natural; rm -rf /' --out "$T/form"
[ ! -e "$T/form" ] && ok "a refused --bwd-form wrote nothing" || bad "a refused --bwd-form left files"
expect "--bwd-form without --backward refused" 1 "CLI0005" -- $Q plan --preset llama3-8b --gpu h100 --bwd-form natural --out "$T/form2"
[ ! -e "$T/form2" ] && ok "--bwd-form without --backward wrote nothing" || bad "--bwd-form without --backward left files"
expect "--combine on the LLM stages refused" 1 "GEN0105" -- $Q generate --preset llama3-8b --gpu h100 --combine --mode llm --llm-url http://127.0.0.1:9/v1 --llm-model m --no-gpu --out "$T/combllm"
[ ! -e "$T/combllm" ] && ok "--combine --mode llm wrote nothing" || bad "--combine --mode llm left files"
expect "no subcommand is a usage error" 2 "" -- $Q
expect "presets list" 0 "llama3-8b" -- $Q presets
expect "gpus list" 0 "H100" -- $Q gpus

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
