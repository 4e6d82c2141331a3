#!/usr/bin/env bash
# Check, format and interpret the FlashAttention-2 forward program of tests/tl/mha.tl.
set -euo pipefail
Q=${1:-build/qattn}
TL=$(dirname "$0")/../tests/tl/mha.tl
$Q tl check "$TL"
$Q tl fmt --check "$TL"
$Q tl run "$TL" --dims batch=2,heads_q=4,heads_kv=4,seqlen_q=100,seqlen_k=130,d=32 --precision fp64
$Q tl run "$TL" --dims batch=2,heads_q=4,heads_kv=4,seqlen_q=100,seqlen_k=130,d=32 --precision storage
