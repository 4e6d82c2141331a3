#include "plan/rules.h"

namespace qattn::plan {

// clang-format off
const std::vector<RuleRow>& rules_table() {
  static const std::vector<RuleRow> kRows = {
    // ---- sm90 (H100, H200): TMA + WGMMA, 1 producer + N consumer warpgroups, 2 K/V stages ------
    {90, 90, false,  64, -1, {192, 128, 16, 2, "d64: softmax costs as much as the GEMMs (exp unit 64/d); 3 consumer warpgroups keep GEMMs issuing while one does softmax; BN=128 keeps S+P+O under the 160-register cap of 4 warpgroups"}},
    {90, 90, false,  96, -1, {128, 144, 12, 2, "d96: 2 consumers at 240 registers; BN=144 is the widest K/V tile whose S+P+O fit"}},
    {90, 90, false, 128,  0, {128, 128, 12, 2, "d128 non-causal: BN=128 divides power-of-two sequences (BN=176 wasted 3% on padding and measured 2-4% slower at 2k-4k on the H100); persistent: the next tile's loads run under this tile's end (+5-10% at 512-1k)", true}},
    {90, 90, false, 128,  1, {128, 128, 12, 2, "d128 causal/local: BN=128 halves the masked work on diagonal tiles and balances the causal triangle; persistent: tiles of unequal length handed out longest first (H100: +4-13% at 512-2k)", true}},
    {90, 90, false, 192,  0, {128, 112, 12, 2, "d192 (MLA prefill 192/128): BN=112 fits 2 K/V stages of 192+128 columns in 188 KB; persistent: the next tile's loads run under this tile's end (H100: 1.05-1.13x vs 0.98-1.04x cuDNN at 512-2k, equal beyond)", true}},
    {90, 90, false, 192,  1, {128, 112, 12, 2, "d192 causal (MLA prefill 192/128): BN=112 fits 2 K/V stages of 192+128 columns in 188 KB; persistent: tiles of unequal length handed out longest first", true}},
    {90, 90, false, 256, -1, {128,  80, 12, 2, "d256: BN=80 is the largest tile whose 2 K/V stages (2 x 80 KB) + Q (64 KB) fit 227 KB; O needs 128 registers"}},
    {90, 90, true,  128, -1, {128, 192, 12, 2, "fp8 d<=128: one-byte K/V halve shared memory, so BN grows to 192 (multiple of 32 for the k32 fp8 wgmma)"}},
    {90, 90, true,  256, -1, {128, 128, 12, 2, "fp8 d256: 2 x 64 KB K/V stages + Q 32 KB; BN multiple of 32"}},
    // ---- sm89 fp8 (L40S, RTX 4090): mma.sync m16n8k32 e4m3, 99 KB per block -------------------
    {89, 89, true,  128, -1, {128,  64,  4, 2, "fp8 d<=128: Q 16 KB + 2 x K/V 16 KB; BN multiple of 32 for m16n8k32"}},
    {89, 89, true,  256, -1, {128,  64,  8, 1, "fp8 d256: 8 warps split the 128 rows so O stays at 128 registers per thread"}},
    // ---- sm86 / sm89 (A10, RTX 3090, L40S, RTX 4090): 99 KB shared memory per block ------------
    {86, 89, false,  64, -1, {128, 128,  4, 1, "d64: Q 16 KB + K/V 32 KB; the large tile amortises the softmax"}},
    {86, 89, false,  96, -1, {128,  64,  4, 1, "d96: Q 24 KB + K/V 24 KB leaves room for 2 blocks per SM"}},
    {86, 89, false, 128,  0, {128,  32,  4, 2, "d128 non-causal (FA2 sm8x): BN=32 keeps K/V at 16 KB so two stages fit twice per SM"}},
    {86, 89, false, 128,  1, { 64,  64,  4, 1, "d128 causal (FA2 sm8x): 64x64 tiles waste less on the diagonal"}},
    {86, 89, false, 256, -1, { 64,  64,  4, 1, "d<=256: Q 32 KB + K/V 64 KB = 96 KB, just under 99 KB"}},
    // ---- sm80 (A100): cp.async + ldmatrix + mma.sync m16n8k16, 163 KB per block ---------------
    {80, 80, false,  32, -1, {128, 128,  4, 1, "d32 (FA2): 128x128 with 4 warps"}},
    {80, 80, false,  64, -1, {128, 128,  4, 1, "d64 (FA2): 128x128, Q 16 KB + K/V 32 KB, 3 blocks per SM"}},
    {80, 80, false,  96, -1, {128,  64,  4, 1, "d96 (FA2): 128x64 with 4 warps"}},
    {80, 80, false, 128, -1, {128,  64,  4, 1, "d128 (FA2): 128x64, 4 warps, O 128 + S 64 registers; 64 KB per block, 2 blocks per SM"}},
    {80, 80, false, 192, -1, {128,  64,  8, 1, "d192 (FA2): 8 warps split the rows so O stays at 96 registers per thread"}},
    {80, 80, false, 256, -1, {128,  64,  8, 1, "d256 (FA2): Q 64 KB + K/V 64 KB = 128 KB of 163 KB; 8 warps"}},
    // ---- sm75 (T4, RTX 8000): no cp.async, mma.sync m16n8k8, 64 KB per block ------------------
    {75, 75, false,  64, -1, {128,  64,  4, 1, "d64: Q 16 KB + K/V 16 KB of the 64 KB per block"}},
    {75, 75, false, 128, -1, { 64,  64,  4, 1, "d128: Q 16 KB + K/V 32 KB; BM=64 keeps O at 64 registers"}},
    {75, 75, false, 256, -1, { 64,  32,  4, 1, "d256: Q 32 KB + K/V 32 KB fills the 64 KB exactly"}},
  };
  return kRows;
}
// clang-format on

std::optional<TileConfig> rule_for(const Problem& p, const Target& t) {
  const bool fp8 = p.dtype == tl::DType::F8E4M3 || p.dtype == tl::DType::F8E5M2;
  const bool causal = p.mask != tl::MaskSpec::Kind::None;
  for (const auto& r : rules_table()) {
    // the wider head dim picks the row: d_qk sizes Q and K, d_v V and O's accumulator
    if (t.sm < r.sm_lo || t.sm > r.sm_hi || r.fp8 != fp8 || std::max(p.d_qk, p.d_v) > r.d_max) continue;
    if (r.causal == 0 && causal) continue;
    if (r.causal == 1 && !causal) continue;
    TileConfig tiles = r.tiles;
    if (p.d_v > p.d_qk) tiles.reason += " (the row of d_v = " + std::to_string(p.d_v) + ", the wider head dim)";
    return tiles;
  }
  return std::nullopt;
}

std::string rules_markdown() {
  std::string out;
  int last = -1;
  for (const auto& r : rules_table()) {
    int key = r.sm_lo * 1000 + r.sm_hi * 10 + (r.fp8 ? 1 : 0);
    if (key != last) {
      out += "\n### sm" + std::to_string(r.sm_lo) + (r.sm_hi != r.sm_lo ? "-sm" + std::to_string(r.sm_hi) : "") +
             (r.fp8 ? " fp8" : " fp16/bf16") + "\n\n| head dim | mask | BM | BN | warps | stages | reason |\n|---|---|---|---|---|---|---|\n";
      last = key;
    }
    out += "| <= " + std::to_string(r.d_max) + " | " + (r.causal < 0 ? "any" : r.causal ? "causal/window" : "none") +
           " | " + std::to_string(r.tiles.bm) + " | " + std::to_string(r.tiles.bn) + " | " +
           std::to_string(r.tiles.warps) + " | " + std::to_string(r.tiles.stages) + " | " + r.tiles.reason + " |\n";
  }
  return out;
}

}  // namespace qattn::plan
