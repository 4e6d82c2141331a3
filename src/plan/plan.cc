#include "plan/plan.h"

#include "plan/budget.h"

#include <array>
#include <algorithm>
#include <atomic>
#include <sstream>
#include <thread>

#include "hw/target.h"
#include "plan/rules.h"
#include "plan/sketch.h"
#include "spec/variants.h"
#include "tl/checker.h"
#include "tl/eval.h"
#include "tl/parser.h"
#include "tl/verdict.h"

namespace qattn::plan {

int Problem::bytes() const {
  switch (dtype) {
    case tl::DType::F32: return 4;
    case tl::DType::F16:
    case tl::DType::BF16: return 2;
    default: return 1;
  }
}

Problem make_problem(const spec::AttentionSpec& s) {
  Problem p;
  p.name = spec::safe_name(s.name);  // a name from code, not through validate(), is made safe too (SPEC0217)
  p.heads_q = s.heads_q;
  p.heads_kv = s.heads_kv;
  p.d_qk = s.head_dim_qk;
  p.d_v = s.head_dim_v;
  // The spec's dtype (fp16, bf16 or fp8_e4m3) and mask kind are the TL's (include/qattn/kinds.h).
  p.dtype = p.out_dtype = s.dtype;
  if (s.dtype == tl::DType::F8E4M3) p.out_dtype = tl::DType::BF16;  // FlashAttention-3 convention: fp8 in, bf16 out
  p.mask = s.mask.kind;
  if (s.mask.kind == tl::MaskSpec::Kind::Window) {
    p.window_left = s.mask.window_left;
    p.window_right = s.mask.window_right;
  }
  p.return_lse = s.return_lse;
  p.kv_cache = s.kv_cache;
  p.varlen = s.varlen;
  p.split_keys = s.split_keys;
  p.return_lse = s.return_lse || s.split_keys;  // the parts are merged by their LSE
  p.deterministic = s.deterministic;
  p.aux_grad = s.aux_grad;
  p.variants = s.variants;
  p.v_from_k = s.v_from_k;
  if (s.problem) p.seqlen_q = s.problem->seqlen_q;
  return p;
}

std::string pack_gqa_decision(const Problem& p, const Target& t, const TileConfig& tiles, bool& pack) {
  pack = false;
  const int group = p.heads_kv > 0 ? p.heads_q / p.heads_kv : 1;
  if (t.sm < 90 || group <= 1 || p.heads_q % p.heads_kv != 0) return "";
  // a group of a multiple of the tile's rows: each tile holds BM of a kv head's query heads (absorbed MLA: 128 heads, BM 64)
  const bool whole_tiles = p.v_from_k && tiles.bm > 0 && group % tiles.bm == 0;
  if (64 % group != 0 && !whole_tiles) return "GQA packing off: a group of " + std::to_string(group) + " query heads does not divide a 64-row warpgroup tile";
  if (p.variants.any()) return "";
  if (p.varlen) {
    // Ragged batches: the counts are per sequence at run time. A serving batch mixes decoding
    // sequences (one query: G rows of a packed tile instead of G tiles of one row each) with prefill
    // chunks; every sequence reads each K/V tile once per group.
    pack = true;
    return "GQA packing: ragged batches (decoding mixed with prefill) put the " + std::to_string(group) +
           " query heads of a kv head in one tile, each K/V tile read once per group";
  }
  if (p.seqlen_q <= 0 || tiles.bm <= 0) return "";
  // Rows a query head's tiles compute per head, without and with packing; pack when it saves at
  // least a fifth (short query sequences: decoding, chunked prefill).
  const int64_t sq = p.seqlen_q, bm = tiles.bm;
  const int64_t plain = (sq + bm - 1) / bm * bm;
  const int64_t packed = (sq * group + bm - 1) / bm * bm;  // for `group` heads
  if (packed * 5 > plain * group * 4) return "";
  pack = true;
  return "GQA packing: seqlen_q " + std::to_string(sq) + " fills " + std::to_string(sq) + " of " + std::to_string(plain) +
         " rows per query head; packing the " + std::to_string(group) + " heads of a kv head computes " +
         std::to_string(packed) + " rows for all of them instead of " + std::to_string(plain * group) +
         " and reads each K/V tile once per group";
}

// Decoding (GQA packing with at most 64 packed rows, seqlen_q x group, or MHA with at most 64 queries):
// every row fits one 64-row warpgroup tile, so BM = 64 with one consumer warpgroup instead of 128 rows
// of which at most half are queries: half the MMA and softmax work per key tile, which decoding's
// memory-bound loop has under its loads. H200, the split kernel alone (bench/results/2026-11-30-h200-merge,
// run5): MQA 32/1 b32 8k 1.03x, MQA 16/1 b8 16k 1.07x, GQA 32/8 b1 64k / b4 16k 1.02x / 1.01x BM 128;
// MHA through the package (bench/results/2026-12-01-h200-decode-mha): pages of 16 1.06-1.23x, pages of
// 64 1.02-1.20x, the contiguous cache unchanged. Measured at d128; a head dim above 128 keeps BM 128.
// True when it changed `tiles`.
bool decode_tile(const Problem& p, const Target& t, TileConfig& tiles) {
  const int64_t group = p.heads_kv > 0 ? p.heads_q / p.heads_kv : 1;
  if (t.sm < 90 || !(tiles.pack_gqa || group == 1) || p.v_from_k || tiles.bm != 128 || tiles.split_columns > 1 || p.seqlen_q <= 0 ||
      p.seqlen_q * group > 64 || p.d_qk > 128 || p.d_v > 128)
    return false;
  tiles.bm = 64;
  tiles.warps = 8;
  if (group > 1)
    tiles.reason += "; decoding: the " + std::to_string(p.seqlen_q * group) +
                    " packed rows fit one 64-row tile: BM=64, one consumer warpgroup (H200: 1.01-1.07x BM 128 on the split "
                    "kernel; bench/results/2026-11-30-h200-merge)";
  else
    tiles.reason += "; decoding: the " + std::to_string(p.seqlen_q) +
                    " query rows of a head fit one 64-row tile: BM=64, one consumer warpgroup (H200 MHA: pages of 16 "
                    "1.06-1.23x BM 128, now within 2% of the contiguous cache; bench/results/2026-12-01-h200-decode-mha)";
  return true;
}

Target make_target(const hw::GpuFacts& g) {
  Target t;
  t.name = g.name;
  t.sm = g.sm;
  t.sm_count = g.sm_count;
  t.smem_per_sm = g.smem_per_sm;
  t.smem_per_block = g.smem_per_block_optin;
  t.regs_per_sm = g.regs_per_sm;
  t.regs_per_thread = g.regs_per_thread_max;
  t.cp_async = g.features.cp_async;
  t.wgmma = g.features.wgmma;
  t.tma = g.features.tma;
  t.fp8 = g.features.fp8;
  t.bf16 = g.features.bf16;
  return t;
}

namespace {


// score_mod / mask_mod are TL text the spec library cannot read: parse each as a declaration
// expression here, so a typo is reported against the spec field (PLAN0301), not as a broken program.
bool check_custom_variants(const spec::AttentionSpec& s, support::DiagSink& diags) {
  bool ok = true;
  if (s.variants.any()) {
    // Specs built in code (not through spec_from_cli) get the variant checks too (SPEC0212-0216).
    support::DiagSink all;
    spec::validate(s, all);
    for (const auto& d : all.all())
      if (d.severity == support::Severity::Error && d.code >= "SPEC0212" && d.code <= "SPEC0216") diags.add(d), ok = false;
  }
  for (const auto& [field, text] : {std::pair<const char*, const std::string&>{"score_mod", s.variants.score_mod},
                                    std::pair<const char*, const std::string&>{"mask_mod", s.variants.mask_mod}}) {
    if (text.empty()) continue;
    support::DiagSink inner(field);
    auto e = tl::parse_variant_expr(text, inner);
    if (e && !inner.has_errors()) continue;
    for (const auto& d : inner.all()) diags.add(d);
    diags.error("PLAN0301", {}, std::string("the spec's ") + field + " is not a TL expression: " + text,
                std::string(field) == "score_mod" ? "e.g. --score-mod 'score + 0.1 * (kv_idx - q_idx)' (docs/spec.md, Variants)"
                                                  : "e.g. --mask-mod 'kv_idx <= q_idx + seqlen_k - seqlen_q' (docs/spec.md, Variants)");
    ok = false;
  }
  return ok;
}

std::string report_markdown(const Plan& p) {
  std::ostringstream os;
  os << "# Plan: " << p.problem.name << " on " << p.target.name << " (sm" << p.target.sm << ")\n\n";
  os << "Chosen tiles: BM=" << p.tiles.bm << ", BN=" << p.tiles.bn << ", warps=" << p.tiles.warps
     << ", K/V stages=" << p.tiles.stages << "\n\nReason: " << p.tiles.reason << "\n\n";
  os << "Budget: shared memory " << kb(p.budget.smem_bytes) << " of " << kb(p.target.smem_per_block)
     << " per block; about " << p.budget.regs_per_thread << " registers per consumer thread; "
     << p.budget.blocks_per_sm << " block(s) per SM.\n\n";
  os << "## Feasible candidates (" << p.candidates.size() << ", best first by the model)\n\n";
  os << "| BM | BN | warps | stages | smem | regs | blocks/SM | score |\n|---|---|---|---|---|---|---|---|\n";
  size_t shown = 0;
  for (const auto& c : p.candidates) {
    if (++shown > 24) break;
    os << "| " << c.tiles.bm << " | " << c.tiles.bn << " | " << c.tiles.warps << " | " << c.tiles.stages << " | "
       << kb(c.budget.smem_bytes) << " | " << c.budget.regs_per_thread << " | " << c.budget.blocks_per_sm << " | "
       << static_cast<int64_t>(c.score) << " |\n";
  }
  if (p.candidates.size() > 24) os << "\n(" << p.candidates.size() - 24 << " more; `qattn plan --candidates`)\n";
  return os.str();
}

}  // namespace

std::optional<Plan> make_plan(const spec::AttentionSpec& s, const hw::GpuFacts& g, support::DiagSink& diags,
                              const PlanOptions& opts) {
  if (opts.backward) return make_backward_plan(s, g, diags, opts);
  if (opts.combine) return make_combine_plan(s, g, diags, opts);
  Plan plan;
  plan.problem = make_problem(s);
  plan.target = make_target(g);
  const Problem& p = plan.problem;
  const Target& t = plan.target;

  if (!hw::validate_for_gpu(s, g, diags)) return std::nullopt;
  if (!check_custom_variants(s, diags)) return std::nullopt;
  plan.candidates = enumerate_candidates(p, t);

  auto rule = rule_for(p, t);
  if (p.v_from_k) {
    if (t.sm < 90 || t.sm >= 100) {
      diags.error("PLAN0103", {}, "v_from_k (V as K's first head_dim_v columns, DeepSeek's absorbed MLA) is planned for Hopper only, not " + t.name,
                  "plan it for an H100 / H200 (`--gpu h100`)");
      return std::nullopt;
    }
    // FlashMLA's shape: 64 query rows (64 query heads of one token) over 64-key tiles of the latent cache, two
    // consumer warpgroups sharing the rows (O is 64 x d_v fp32: 128 registers per thread each for d_v 512)
    rule = TileConfig{64, 64, 12, 2,
                      "absorbed MLA (V = K's first " + std::to_string(p.d_v) + " columns): BM=64 rows shared by 2 consumer warpgroups "
                      "(split columns: 32 score columns and " + std::to_string(p.d_v / 2) + " columns of O each); Q " +
                          std::to_string(64 * p.d_qk * p.bytes() / 1024) + " KB + 2 stages of K " +
                          std::to_string(64 * p.d_qk * p.bytes() / 1024) + " KB, V read from K's slot; persistent",
                      true};
    rule->split_columns = 2;
  }
  TileConfig tiles;
  if (rule) {
    tiles = *rule;
  } else if (!plan.candidates.empty()) {
    tiles = plan.candidates.front().tiles;
    tiles.reason = "no rules-table row for this head dim; best feasible candidate of the resource model";
  }
  const bool overridden = opts.bm || opts.bn || opts.warps || opts.stages;
  if (opts.bm) tiles.bm = opts.bm;
  if (opts.bn) tiles.bn = opts.bn;
  if (opts.warps) tiles.warps = opts.warps;
  if (opts.stages) tiles.stages = opts.stages;
  if (overridden) tiles.reason = "set by the user (--tiles)";

  Budget budget = estimate(p, t, tiles);
  if (!budget.fits && overridden) {
    diags.error("PLAN0102", {}, "tiles BM=" + std::to_string(tiles.bm) + " BN=" + std::to_string(tiles.bn) + " warps=" +
                                    std::to_string(tiles.warps) + " stages=" + std::to_string(tiles.stages) +
                                    " do not fit " + t.name + ": " + budget.why_not,
                "drop the override, or choose one of `qattn plan --candidates`");
    return std::nullopt;
  }
  if (!budget.fits) {
    if (plan.candidates.empty()) {
      Budget smallest = estimate(p, t, smallest_candidate(p, t));
      diags.error("PLAN0101", {}, "no tile configuration fits " + t.name + " for head dims " + std::to_string(p.d_qk) +
                                      "/" + std::to_string(p.d_v) + " in " + tl::to_string(p.dtype) +
                                      ": even the smallest (BM=64, BN=16): " +
                                      (smallest.why_not.empty() ? std::string("does not fit") : smallest.why_not),
                  "use a smaller head dim, a narrower dtype, or a GPU with more shared memory / registers (see `qattn gpus`)");
      return std::nullopt;
    }
    std::string why = budget.why_not;
    tiles = plan.candidates.front().tiles;
    tiles.reason = "the rules-table row does not fit (" + why + "); best feasible candidate of the resource model";
    budget = plan.candidates.front().budget;
  }
  {
    bool pack = false;
    const std::string why = pack_gqa_decision(p, t, tiles, pack);
    tiles.pack_gqa = pack;
    if (!why.empty()) tiles.reason += "; " + why;
    if (!overridden && decode_tile(p, t, tiles)) budget = estimate(p, t, tiles);
  }
  plan.tiles = tiles;
  plan.budget = budget;

  // Stage 1a and 1b, then verify what the rules engine wrote exactly as an LLM's answer would be.
  plan.sketch = sketch_text(p, t);
  plan.code = code_text(p, t, tiles);
  support::DiagSink inner("code.tl");
  if (!check_written(plan.sketch, plan.code, inner)) {
    for (const auto& d : inner.all()) diags.add(d);
    if (s.variants.custom()) {
      // The rules engine's own statements are verified on every preset; a failure here is the
      // user's expression (an unknown name, `score` in a mask, a predicate as a score, ...).
      diags.error("PLAN0302", {}, "the spec's score_mod / mask_mod does not check as a TL declaration (see above)",
                  "score_mod uses score, q_idx, kv_idx; mask_mod is a predicate over q_idx, kv_idx; both may use b, head, "
                  "kv_head, the Dims (batch, heads_q, seqlen_q, seqlen_k, ...) and auxiliary tensors (docs/spec.md, Variants)");
      return std::nullopt;
    }
    diags.error("PLAN0901", {}, "internal error: the rules engine wrote TL that fails verification",
                "please report this with the spec (qattn spec show ...) and the GPU");
    return std::nullopt;
  }
  plan.report = report_markdown(plan);
  return plan;
}

namespace {

// A ragged tail of a tile of t rows: neither empty nor full (none for a tile of one row).
int64_t ragged(int64_t t) { return t >= 2 ? t / 4 + 1 : 0; }
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<VerifyCase> verification_cases(const Plan& plan) {
  // The program's own tiles: `Const BM, BN` as it declares them (an LLM's answer may differ from
  // the rules engine's), else the plan's.
  support::DiagSink inner("code.tl");
  const auto prog = tl::parse(plan.code, inner, "code.tl");
  tl::Env env;
  for (const auto& s : prog.stmts) {
    if (s.kind == tl::Stmt::Kind::Dim)
      for (const auto& it : s.dim.items)
        if (it.value)
          if (auto x = tl::eval_int(*it.value, env)) env.ints[it.name] = *x;
    if (s.kind == tl::Stmt::Kind::Const)
      for (const auto& it : s.cnst.items)
        if (auto x = tl::eval_int(it.value, env)) env.ints[it.name] = *x;
  }
  auto tile = [&](const char* name, int64_t dflt) {
    auto it = env.ints.find(name);
    const int64_t t = it != env.ints.end() && it->second > 0 && it->second <= (1 << 16) ? it->second : dflt;
    return std::max<int64_t>(1, t);
  };
  const int64_t bm = tile("BM", plan.tiles.bm), bn = tile("BN", plan.tiles.bn);
  const Problem& p = plan.problem;
  bool combine = false;
  for (const auto& s : prog.stmts) combine = combine || (s.kind == tl::Stmt::Kind::Kernel && s.kernel.combine);
  if (combine) {
    // The combine: rows under one tile with batch 2 and 3 heads over 3 parts; 3 ragged row tiles of
    // one part; 2 ragged row tiles over 16 parts (the interpreter draws some parts empty, and one
    // row with every part empty).
    std::vector<VerifyCase> out;
    auto add = [&](int64_t batch, int64_t heads, int64_t sq, int64_t splits) {
      VerifyCase c;
      c.dims = {{"batch", batch}, {"heads_q", heads}, {"seqlen_q", sq}, {"splits", splits}};
      c.what = std::to_string(cdiv(sq, bm)) + " row tiles, " + std::to_string(splits) + " parts (BM " + std::to_string(bm) + ")";
      out.push_back(std::move(c));
    };
    add(2, 3, bm > 1 ? std::min(bm - 1, bm / 4 + 1) : 1, 3);
    add(1, 2, 2 * bm + ragged(bm), 1);
    add(1, 3, bm + ragged(bm), 16);
    return out;
  }
  const int64_t group = std::min<int64_t>(2, std::max(1, p.heads_q / std::max(1, p.heads_kv)));
  const int64_t heads_kv = p.heads_kv == 1 ? 1 : 2;
  // Packed sequences: queries and keys share the segment ids (random_aux gives equal rows for
  // equal lengths), so both lengths are equal.
  const bool same = p.variants.document;

  std::vector<VerifyCase> out;
  auto add = [&](int64_t batch, int64_t hkv, int64_t sq, int64_t sk) {
    VerifyCase c;
    // One query head per kv head where two would pass the interpreter's limit on the reference.
    const double madds = double(batch) * hkv * sq * sk * (std::max(1, p.d_qk) + std::max(1, p.d_v));
    const int64_t g = madds * group > 0.8 * tl::kMaxReferenceMadds ? 1 : group;
    c.dims = {{"batch", batch}, {"heads_kv", hkv}, {"heads_q", hkv * g}, {"seqlen_q", sq}, {"seqlen_k", sk}};
    c.what = std::to_string(cdiv(sq, bm)) + "x" + std::to_string(cdiv(sk, bn)) + " tiles";
    out.push_back(std::move(c));
  };
  // 1. Both lengths under one tile; batch 2 and two kv heads (GQA: two query heads each).
  int64_t sq = bm > 1 ? std::min(bm - 1, bm / 4 + 1) : 1;
  int64_t sk = bn > 1 ? std::min(bn - 1, bn / 2 + 1) : 1;
  if (same) sq = sk = std::min(sq, sk);
  add(2, heads_kv, sq, sk);
  // 2. 3 query tiles, 2 key tiles, both ragged: seqlen_q > seqlen_k (a bottom-right causal mask
  //    leaves the first rows without a key).
  sq = 2 * bm + ragged(bm);
  sk = std::min(bn + ragged(bn), sq - 1);
  if (!same && sk >= 1) add(1, 1, sq, sk);
  // 3. 3 query tiles, 5 or more key tiles, both ragged, seqlen_k > seqlen_q: every key-loop bound
  //    that stops early, every grid that covers too few query tiles fails here.
  sk = 4 * bn + ragged(bn);
  while (sk <= sq) sk += bn;
  if (same) sq = sk = std::max(sq, 4 * bn + ragged(bn));
  add(1, 1, sq, sk);
  // 4. One ragged query tile over 16 key tiles and a ragged tail: a key loop capped at any count
  //    below 17 tiles fails here (cheap: a quarter tile of queries). Not with equal lengths.
  if (!same) add(1, 1, bm > 1 ? std::min(bm - 1, bm / 4 + 1) : 1, 16 * bn + ragged(bn));
  if (p.kv_cache != spec::KvCache::None) {
    // A KV cache: the first size with 3 sequences (a full, an empty and a random key count: the
    // interpreter draws them); pages of 16 rows (several per key tile) and of 2 key tiles, in turn.
    out.front().dims["batch"] = 3;
    for (size_t i = 0; i < out.size() && p.kv_cache == spec::KvCache::Paged; ++i) {
      const int64_t ps = i % 2 == 0 ? 16 : 2 * bn, sk = out[i].dims["seqlen_k"];
      out[i].dims["page_size"] = ps;
      out[i].dims["pages"] = cdiv(sk, ps);
      out[i].what += ", pages of " + std::to_string(ps);
    }
  }
  if (p.varlen)  // ragged batches: the two smaller sizes with 5 sequences (a full, an empty and random ones: the
                 // interpreter draws them), the larger ones with 2 (a full one and a random one, in the multiply-add budget)
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t n = i < 2 ? 5 : 2;
      out[i].dims["batch"] = n;
      out[i].what += ", " + std::to_string(n) + " ragged sequences";
    }
  bool split = false;  // split keys: 3 parts (some empty on the small sizes), 1, 4 and 7 in turn
  for (const auto& s : prog.stmts)
    if (s.kind == tl::Stmt::Kind::Dim)
      for (const auto& it : s.dim.items) split = split || (it.name == "splits" && !it.value);
  for (size_t i = 0; split && i < out.size(); ++i) {
    const int64_t n = std::array<int64_t, 4>{3, 1, 4, 7}[i % 4];
    out[i].dims["splits"] = n;
    out[i].what += ", " + std::to_string(n) + " part" + (n == 1 ? "" : "s") + " of the keys";
  }
  for (auto& c : out) c.what += " (BM " + std::to_string(bm) + ", BN " + std::to_string(bn) + ")";
  return out;
}

bool Verification::passed() const {
  if (cases.empty()) return false;
  for (const auto& c : cases)
    if (!c.passed()) return false;
  return true;
}

std::string Verification::sizes() const {
  std::ostringstream os;
  int ran = 0;
  for (const auto& c : cases) ran += c.ran;
  os << ran << " of " << cases.size() << " sizes (batch x heads_q/heads_kv x seqlen_q x seqlen_k):";
  const char* sep = " ";
  for (const auto& c : cases) {
    auto d = [&](const char* n) { return c.dims.count(n) ? std::to_string(c.dims.at(n)) : std::string("?"); };
    if (c.dims.count("splits"))  // a combine: batch x heads_q x seqlen_q, over the parts
      os << sep << d("batch") << "x" << d("heads_q") << "x" << d("seqlen_q") << " over " << d("splits") << " parts";
    else
      os << sep << d("batch") << "x" << d("heads_q") << "/" << d("heads_kv") << "x" << d("seqlen_q") << "x" << d("seqlen_k");
    os << " [" << c.what << "] " << (!c.ran ? "not run" : c.passed() ? "pass" : "FAIL");
    sep = ", ";
  }
  return os.str();
}

Verification verify(const Plan& plan, support::DiagSink& diags) {
  Verification v;
  v.cases = verification_cases(plan);
  const Problem& p = plan.problem;
  support::DiagSink inner("code.tl");
  const auto prog = tl::parse(plan.code, inner, "code.tl");
  // The launch-time window of each case (the kernel takes it at run time, so every case may use
  // another one): the spec's own first, then windows that cut tiles, and unbounded sides (-1).
  const std::pair<int64_t, int64_t> windows[] = {
      {p.window_left, p.window_right}, {37, 0}, {-1, 19}, {150, -1}, {5, 3}};
  // Every case at both precisions, each run on a thread of its own (the interpreter keeps no
  // shared state; each run reports into its own sink, merged below in case order): the verdict is
  // the slowest run's time, not the sum (spec to kernel on a first call, docs/python.md).
  struct Run {
    tl::RunConfig cfg;
    support::DiagSink sink{"code.tl"};
    tl::RunResult result;
  };
  std::vector<Run> runs(2 * v.cases.size());
  for (size_t ci = 0; ci < v.cases.size(); ++ci) {
    VerifyCase& c = v.cases[ci];
    tl::RunConfig cfg;
    cfg.dims = c.dims;
    if (p.mask == tl::MaskSpec::Kind::Window) {
      const auto& w = windows[std::min(ci, std::size(windows) - 1)];
      cfg.window_left = w.first;
      cfg.window_right = w.second;
      c.what += " window(" + std::to_string(w.first) + ", " + std::to_string(w.second) + ")";
    }
    if (p.variants.softcap) cfg.softcap = *p.variants.softcap;
    if (p.variants.any() && !p.variants.custom()) {
      // The reference's variant from the spec's own C++ formulas (spec/variants.h), so the program's
      // Score / Mask declarations are checked against an independent statement of the same thing.
      // With a custom score_mod / mask_mod the interpreter evaluates the declarations themselves.
      spec::AttentionProblem ap;
      ap.seqlen_q = c.dims["seqlen_q"];
      ap.seqlen_k = c.dims["seqlen_k"];
      cfg.reference_variant = [vars = p.variants, ap](const spec::AuxMap& aux) {
        return spec::reference_variant(vars, ap, aux).value_or(spec::ScoreVariant{});
      };
    }
    cfg.precision = tl::Precision::FP64;
    runs[2 * ci].cfg = cfg;
    cfg.precision = tl::Precision::Storage;
    cfg.seed = 2;
    runs[2 * ci + 1].cfg = cfg;
  }
  {
    // as many at once as there are cores (each run has its own interpreter memory budget)
    const size_t workers = std::min<size_t>(runs.size(), std::max(2u, std::thread::hardware_concurrency()));
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (size_t w = 0; w < workers; ++w)
      threads.emplace_back([&] {
        for (size_t i = next++; i < runs.size(); i = next++) runs[i].result = tl::run(prog, runs[i].cfg, runs[i].sink);
      });
    for (auto& t : threads) t.join();
  }
  for (size_t ci = 0; ci < v.cases.size(); ++ci) {
    VerifyCase& c = v.cases[ci];
    for (Run* r : {&runs[2 * ci], &runs[2 * ci + 1]}) {
      for (const auto& d : r->sink.all()) inner.add(d);
      tl::require_finite(r->result, r->cfg.precision, inner);
    }
    c.fp64 = std::move(runs[2 * ci].result);
    c.storage = std::move(runs[2 * ci + 1].result);
    c.ran = true;
  }
  for (const auto& c : v.cases)
    if (!c.passed()) {
      std::string at;
      for (const auto& [n, x] : c.dims) at += (at.empty() ? "" : " ") + n + "=" + std::to_string(x);
      inner.add({support::Severity::Note, "TL0801", "code.tl", {}, "at " + at + " (" + c.what + "); verified sizes: " + v.sizes(),
                 "the sizes come from the program's tiles: 3 query tiles, 5 or more key tiles, 17 key tiles, ragged tails, "
                 "seqlen_q != seqlen_k both ways, lengths under one tile"});
      break;
    }
  // The deciding case: the first failure, else the least storage-precision margin.
  const VerifyCase* pick = nullptr;
  double margin = -1;
  for (const auto& c : v.cases) {
    if (!c.ran) continue;
    if (!c.passed()) { pick = &c; break; }
    const double m = c.storage.tolerance > 0 ? c.storage.max_abs_err / c.storage.tolerance : 0;
    if (!pick || m > margin) pick = &c, margin = m;
  }
  if (pick) {
    v.dims = pick->dims;
    v.fp64 = pick->fp64;
    v.storage = pick->storage;
  }
  for (const auto& d : inner.all()) diags.add(d);
  return v;
}

}  // namespace qattn::plan
