#!/usr/bin/env bash
# A spec as JSON: MLA-style head dims (192/128), sliding window of 1024 keys, log-sum-exp output.
set -euo pipefail
Q=${1:-build/qattn}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cat > "$OUT/spec.json" <<'JSON'
{
  "name": "mla-window",
  "heads_q": 16,
  "heads_kv": 16,
  "head_dim_qk": 192,
  "head_dim_v": 128,
  "dtype": "bf16",
  "mask": {"kind": "window", "left": 1024, "right": 0},
  "return_lse": true
}
JSON
$Q spec show --spec "$OUT/spec.json"
for gpu in a100 h100; do
  $Q plan --spec "$OUT/spec.json" --gpu $gpu --out "$OUT/$gpu"
  grep -E "^for |LSE" "$OUT/$gpu/code.tl"
done
