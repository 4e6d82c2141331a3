// AttentionSpec basics: enum names, derived values, name helpers and the target-independent
// checks (SPEC02xx). JSON is in spec_json.cc, presets in presets.cc, CLI flags in flags.cc.
#include "spec/spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace qattn::spec {

// ---- enums --------------------------------------------------------------------------------
std::optional<DType> parse_dtype(std::string_view s) {
  std::string k = name_key(s);
  if (k == "fp16" || k == "f16" || k == "half" || k == "float16") return DType::F16;
  if (k == "bf16" || k == "bfloat16") return DType::BF16;
  if (k == "fp8e4m3" || k == "e4m3" || k == "fp8" || k == "f8e4m3") return DType::F8E4M3;
  return std::nullopt;
}

int dtype_bytes(DType t) {
  switch (t) {
    case DType::F8E4M3: case DType::F8E5M2: return 1;
    case DType::F16: case DType::BF16: return 2;
    case DType::F32: case DType::I32: return 4;
  }
  return 2;
}

std::string describe(const Mask& m) {
  switch (m.kind) {
    case MaskKind::None: return "none";
    case MaskKind::Causal: return "causal";
    case MaskKind::CausalTopLeft: return "causal (top-left)";
    case MaskKind::Window:
      return "window(" + std::to_string(m.window_left) + "," + std::to_string(m.window_right) + ")";
    case MaskKind::Bounds: case MaskKind::Named: break;  // not spec masks (validate() says so)
  }
  return to_string(m.kind);
}

std::string describe(const Variants& v) {
  std::vector<std::string> parts;
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  if (v.alibi) parts.push_back("alibi");
  if (v.relative_bias) parts.push_back("relative bias " + std::to_string(*v.relative_bias) + " buckets");
  if (!v.score_mod.empty()) parts.push_back("score_mod");
  if (v.softcap) parts.push_back("softcap " + num(*v.softcap));
  if (v.prefix_lm) parts.push_back("prefix-LM " + std::to_string(*v.prefix_lm));
  if (v.document) parts.push_back("document");
  if (!v.mask_mod.empty()) parts.push_back("mask_mod");
  return join(parts);
}

const char* to_string(Layout l) { return l == Layout::BHSD ? "bhsd" : "bshd"; }

std::optional<Layout> parse_layout(std::string_view s) {
  std::string k = name_key(s);
  if (k == "bshd") return Layout::BSHD;
  if (k == "bhsd") return Layout::BHSD;
  return std::nullopt;
}

const char* to_string(KvCache k) { return k == KvCache::Paged ? "paged" : k == KvCache::Lengths ? "lengths" : "none"; }

std::optional<KvCache> parse_kv_cache(std::string_view s) {
  std::string k = name_key(s);
  if (k == "none") return KvCache::None;
  if (k == "lengths") return KvCache::Lengths;
  if (k == "paged") return KvCache::Paged;
  return std::nullopt;
}

// ---- derived values -----------------------------------------------------------------------
double effective_softmax_scale(const AttentionSpec& s) {
  if (s.softmax_scale) return *s.softmax_scale;
  return s.head_dim_qk > 0 ? 1.0 / std::sqrt(double(s.head_dim_qk)) : 0.0;
}

int group_size(const AttentionSpec& s) { return s.heads_kv > 0 ? s.heads_q / s.heads_kv : 0; }

std::string variant_name(const AttentionSpec& s) {
  if (s.head_dim_qk > s.head_dim_v) return "MLA";
  if (s.heads_kv == s.heads_q) return "MHA";
  if (s.heads_kv == 1) return "MQA";
  return "GQA";
}

std::string summary(const AttentionSpec& s) {
  std::string out = s.name.empty() ? std::string("<unnamed>") : safe_name(s.name);
  out += ": " + variant_name(s) + " " + std::to_string(s.heads_q) + "/" + std::to_string(s.heads_kv) +
         " heads, d ";
  out += std::to_string(s.head_dim_qk);
  if (s.head_dim_v != s.head_dim_qk) out += "/" + std::to_string(s.head_dim_v);
  out += std::string(", ") + to_string(s.dtype) + ", " + describe(s.mask);
  if (s.variants.any()) out += ", " + describe(s.variants);
  out += std::string(", ") + to_string(s.layout);
  if (!s.gpu.empty()) out += ", gpu " + s.gpu;
  return out;
}

const std::vector<int>& supported_head_dims() {
  static const std::vector<int> dims{32, 64, 96, 128, 192, 256};
  return dims;
}

// ---- name helpers -------------------------------------------------------------------------
std::string name_key(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '-' || c == '_' || c == ' ') continue;
    out += char(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

static int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = int(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = int(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_name(std::string_view s, const std::vector<std::string>& candidates) {
  std::string key = name_key(s);
  std::string best;
  int best_d = 1 << 30;
  for (const auto& c : candidates) {
    int d = edit_distance(key, name_key(c));
    if (d < best_d) best_d = d, best = c;
  }
  // Close enough to be a typo: at most a third of the name, and at least one edit allowed.
  int limit = std::max<int>(1, int(key.size()) / 3);
  return best_d <= limit ? best : std::string();
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

SrcLoc SourceMap::at(const std::string& pointer) const {
  auto it = where.find(pointer);
  return it == where.end() ? SrcLoc{} : it->second;
}

// ---- the spec's name -----------------------------------------------------------------------
namespace {
bool ascii_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool name_char(char c) { return ascii_alnum(c) || c == '.' || c == '_' || c == '-'; }
}  // namespace

bool is_safe_name(std::string_view n) {
  if (n.empty() || n.size() > kMaxNameLength || !ascii_alnum(n[0])) return false;
  for (size_t i = 0; i < n.size(); ++i)
    if (!name_char(n[i]) || (n[i] == '.' && i && n[i - 1] == '.'))
      return false;
  return true;
}

std::string safe_name(std::string_view n) {
  if (n.empty() || is_safe_name(n)) return std::string(n);
  std::string out;
  for (char c : n) {
    const bool ok = ascii_alnum(c) || c == '_' || c == '-' || (c == '.' && (out.empty() || out.back() != '.'));
    out += ok ? c : '_';
  }
  if (!ascii_alnum(out[0])) out.insert(out.begin(), 'n');
  if (out.size() > kMaxNameLength) out.resize(kMaxNameLength);
  return out;
}

// ---- validation ---------------------------------------------------------------------------
namespace {

// SPEC0217: why `name` is not a safe name, the name shown with its control characters escaped.
void check_name(const std::string& name, DiagSink& diags, SrcLoc loc) {
  if (name.empty() || is_safe_name(name)) return;
  std::string shown, why;
  for (size_t i = 0; i < name.size() && i < 48; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') shown += char(c);
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      shown += buf;
    }
  }
  if (name.size() > 48) shown += "...";
  if (name.size() > kMaxNameLength)
    why = "is " + std::to_string(name.size()) + " characters long (at most " + std::to_string(kMaxNameLength) + ")";
  else if (!ascii_alnum(name[0]))
    why = "does not start with a letter or a digit";
  else if (name.find("..") != std::string::npos)
    why = "contains \"..\"";
  else
    for (char c : name)
      if (why.empty() && !name_char(c)) {
        const auto u = static_cast<unsigned char>(c);
        char buf[64];
        if (u >= 0x20 && u < 0x7f) std::snprintf(buf, sizeof buf, "contains '%c'", c);
        else std::snprintf(buf, sizeof buf, "contains the byte 0x%02x (a control or non-ASCII character)", u);
        why = buf;
      }
  diags.error("SPEC0217", loc,
              "name \"" + shown + "\" " + why + ": a name is 1-" + std::to_string(kMaxNameLength) +
                  " characters from A-Z a-z 0-9 . _ - , starting with a letter or a digit, with no \"..\"",
              "e.g. \"name\": \"" + safe_name(name.substr(0, 48)) + "\" (the name names the artifacts folder artifacts/<name>-<gpu>)");
}

std::string dims_list() {
  std::vector<std::string> v;
  for (int d : supported_head_dims()) v.push_back(std::to_string(d));
  return join(v);
}

// The divisors of heads_q, and the one nearest to `kv`.
std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

void check_head_dim(const char* field, int d, DiagSink& diags, const SourceMap* where, bool v_from_k = false) {
  const auto& ok = supported_head_dims();
  if (std::find(ok.begin(), ok.end(), d) != ok.end()) return;
  SrcLoc loc = where ? where->at(std::string("/") + field) : SrcLoc{};
  // DeepSeek's absorbed MLA: one latent cache of 512 + 64 rotary columns (`v_from_k`)
  if (v_from_k && std::string(field) == "head_dim_qk" && d > 512 && d <= 576 && d % 64 == 0) return;
  // Other multiples of 32 up to 512 are accepted: the planner's resource model decides whether a
  // tile fits the target (and explains when none does); they have no tuned rules-table row.
  if (d > 0 && d <= 512 && d % 32 == 0) {
    diags.warning("SPEC0211", loc,
                  std::string(field) + " = " + std::to_string(d) + " is not one of the tuned head dims (" +
                      dims_list() + ")",
                  "the planner picks tiles from its resource model; check `qattn plan --candidates`");
    return;
  }
  // Nearest supported dim at or above d: zero-padding the head dim keeps results exact.
  int up = 0;
  for (int s : ok)
    if (s >= d) { up = s; break; }
  std::string hint;
  if (v_from_k && std::string(field) == "head_dim_qk") hint = "with v_from_k (absorbed MLA) head_dim_qk is a multiple of 64 up to 576";
  else if (!up) hint = "split the head into supported sizes";
  else if (std::string(field) == "head_dim_qk")
    hint = "pad Q and K with zeros to " + std::to_string(up) + " and set softmax_scale to 1/sqrt(" +
           std::to_string(d) + "); the scores are unchanged";
  else
    hint = "pad V with zeros to " + std::to_string(up) + " and drop the extra output columns";
  diags.error("SPEC0203", loc,
              std::string(field) + " = " + std::to_string(d) + " is not supported; supported head dims: " +
                  dims_list(),
              hint);
}

// A TL expression carried as text (score_mod / mask_mod): the planner parses it (the spec library
// does not depend on the TL); here only what would break a one-line TL statement is refused.
void check_tl_text(const char* field, const std::string& text, DiagSink& diags, SrcLoc loc) {
  if (text.empty()) return;
  constexpr size_t kMax = 2000;
  std::string bad;
  if (text.size() > kMax) bad = "is " + std::to_string(text.size()) + " characters long (at most " + std::to_string(kMax) + ")";
  for (char c : text)
    if (bad.empty() && (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '#' || c == '{'))
      bad = c == '#' ? "contains '#' (a TL comment)" : c == '{' ? "contains '{' (TL attributes)" : "contains a line break or control character";
  if (bad.empty()) return;
  diags.error("SPEC0215", loc, std::string(field) + " " + bad + ": it must be one TL expression on one line",
              std::string(field) == "score_mod" ? "e.g. \"score_mod\": \"score + 0.1 * (kv_idx - q_idx)\" (docs/spec.md, Variants)"
                                                : "e.g. \"mask_mod\": \"kv_idx <= q_idx + seqlen_k - seqlen_q\" (docs/spec.md, Variants)");
}

void check_variants(const AttentionSpec& s, DiagSink& diags, const SourceMap* where) {
  const Variants& v = s.variants;
  auto at = [&](const char* key) {
    if (!where) return SrcLoc{};
    SrcLoc l = where->at(std::string("/variants/") + key);
    return l.line ? l : where->at("/variants");
  };
  if (v.softcap && !(std::isfinite(*v.softcap) && *v.softcap > 0))
    diags.error("SPEC0212", at("softcap"), "softcap = " + std::to_string(*v.softcap) + " must be a finite number > 0",
                "logit softcapping computes c * tanh(s / c); Gemma 2 uses 50 (attention) and 30 (final logits)");
  if (v.prefix_lm) {
    if (*v.prefix_lm < 0)
      diags.error("SPEC0213", at("prefix_lm"), "prefix_lm = " + std::to_string(*v.prefix_lm) + " must be >= 0",
                  "the number of leading keys every query sees (bidirectional prefix); 0 is plain causal");
    if (s.mask.kind != MaskKind::None)
      diags.error("SPEC0213", at("prefix_lm"),
                  std::string("prefix_lm needs mask \"none\", but the mask is ") + describe(s.mask) +
                      ": prefix-LM is already causal outside the prefix",
                  "remove the mask (\"mask\": \"none\", or --mask none)");
  }
  if (v.relative_bias && (*v.relative_bias < 2 || *v.relative_bias > 4096 || *v.relative_bias % 2 != 0))
    diags.error("SPEC0214", at("relative_bias"),
                "relative_bias = " + std::to_string(*v.relative_bias) + " buckets: must be even, from 2 to 4096",
                "the table has NB entries per head for relative positions -NB/2 .. NB/2-1 (clamped), e.g. 32");
  check_tl_text("score_mod", v.score_mod, diags, at("score_mod"));
  check_tl_text("mask_mod", v.mask_mod, diags, at("mask_mod"));
}

}  // namespace

bool validate(const AttentionSpec& s, DiagSink& diags, const SourceMap* where) {
  int before = diags.error_count();
  auto at = [&](const char* ptr) { return where ? where->at(ptr) : SrcLoc{}; };

  check_name(s.name, diags, at("/name"));

  // Heads.
  bool heads_ok = true;
  if (s.heads_q <= 0) {
    diags.error("SPEC0201", at("/heads_q"), "heads_q = " + std::to_string(s.heads_q) + " must be positive",
                "set heads_q to the model's number of query heads (num_attention_heads)");
    heads_ok = false;
  }
  if (s.heads_kv <= 0) {
    diags.error("SPEC0201", at("/heads_kv"),
                "heads_kv = " + std::to_string(s.heads_kv) + " must be positive",
                "set heads_kv to the model's number of key/value heads (num_key_value_heads); "
                "heads_kv = heads_q is MHA, 1 is MQA");
    heads_ok = false;
  }
  if (heads_ok && s.heads_q % s.heads_kv != 0) {
    std::vector<int> divs = divisors(s.heads_q);
    int best = 1 << 30;
    for (int d : divs) best = std::min(best, std::abs(d - s.heads_kv));
    std::vector<std::string> nearest;  // one, or two on a tie (6 for 32 heads: 4 or 8)
    for (int d : divs)
      if (std::abs(d - s.heads_kv) == best) nearest.push_back(std::to_string(d));
    std::vector<std::string> dv;
    for (int d : divs) dv.push_back(std::to_string(d));
    diags.error("SPEC0202", at("/heads_kv"),
                "heads_q = " + std::to_string(s.heads_q) + " is not a multiple of heads_kv = " +
                    std::to_string(s.heads_kv) + ": every KV head must serve the same number of query heads",
                "use heads_kv = " + join(nearest, " or ") + " (nearest divisor of " +
                    std::to_string(s.heads_q) + "; valid: " + join(dv) + ")");
  }

  // Head dims.
  check_head_dim("head_dim_qk", s.head_dim_qk, diags, where, s.v_from_k);
  check_head_dim("head_dim_v", s.head_dim_v, diags, where);
  // (head_dim_v > head_dim_qk is accepted: SPEC0204 is retired; with v_from_k it is SPEC0236)

  // Mask. (A window aligned top-left, SPEC0206, cannot be written in a Mask: the JSON reader reports it.)
  if (s.mask.kind == MaskKind::Bounds || s.mask.kind == MaskKind::Named) {
    diags.error("SPEC0107", at("/mask"), std::string("mask kind \"") + to_string(s.mask.kind) + "\" is not a spec mask",
                "valid values: none, causal, causal_top_left, window");
  }
  if (s.mask.kind == MaskKind::Window) {
    if (s.mask.window_left < -1 || s.mask.window_right < -1) {
      diags.error("SPEC0205", at("/mask"),
                  "window sizes must be >= 0 or -1 (unbounded), got left = " + std::to_string(s.mask.window_left) +
                      ", right = " + std::to_string(s.mask.window_right),
                  "use right = 0 for causal sliding-window attention and -1 for no limit on a side");
    }
  }

  // Softmax scale.
  if (s.softmax_scale && !(std::isfinite(*s.softmax_scale) && *s.softmax_scale > 0)) {
    diags.error("SPEC0207", at("/softmax_scale"),
                "softmax_scale = " + std::to_string(*s.softmax_scale) + " must be a finite number > 0",
                "omit softmax_scale to use 1/sqrt(head_dim_qk)");
  }

  // Dtype: Q, K and V are fp16, bf16 or fp8_e4m3 (the other qattn::DType values are internal).
  if (s.dtype != DType::F16 && s.dtype != DType::BF16 && s.dtype != DType::F8E4M3) {
    diags.error("SPEC0107", at("/dtype"), std::string("dtype \"") + to_string(s.dtype) + "\" is not a spec dtype",
                "valid values: fp16, bf16, fp8_e4m3");
  }

  // FP8 descale flags.
  if (s.dtype != DType::F8E4M3 && s.fp8.any()) {
    diags.error("SPEC0208", at("/fp8"),
                std::string("fp8 descale factors are set but dtype is ") + to_string(s.dtype),
                "remove \"fp8\" or set \"dtype\": \"fp8_e4m3\"");
  }

  check_variants(s, diags, where);

  // Split keys: each part's O and LSE at [b, s, head]; ragged queries over a KV cache hold the parts
  // one after another, (splits, total_q, heads_q, d) (docs/tl.md, "Ragged batches"). Packed ragged keys
  // (varlen without a cache) are not split. Masks and variants split too: every part applies them to
  // its own key tiles.
  if (s.split_keys && s.varlen && s.kv_cache == KvCache::None)
    diags.error("SPEC0219", at("/split_keys"),
                "split_keys with varlen and no kv_cache: the keys of packed ragged sequences (cu_seqlens_k) are not split",
                "split the keys of a KV cache (\"kv_cache\": \"paged\" or \"lengths\", ragged queries over it) or of "
                "equal-length sequences (\"split_keys\" without \"varlen\")");

  // The gradients of auxiliary inputs: the fp32 ones (ALiBi's slopes, the relative bias's table).
  // V inside K (DeepSeek's absorbed MLA): a narrower V than K's columns, on a forward of its own kind.
  if (s.v_from_k && s.head_dim_v >= s.head_dim_qk)
    diags.error("SPEC0236", at("/v_from_k"),
                "v_from_k with head_dim_v = " + std::to_string(s.head_dim_v) + " >= head_dim_qk = " + std::to_string(s.head_dim_qk) +
                    ": V is the first head_dim_v columns of K",
                "DeepSeek-V3's absorbed MLA: \"head_dim_qk\": 576, \"head_dim_v\": 512");
  if (s.v_from_k && (s.varlen || s.variants.any() || s.dtype == DType::F8E4M3))
    diags.error("SPEC0237", at("/v_from_k"),
                std::string("v_from_k with ") + (s.varlen ? "varlen" : s.variants.any() ? "variants" : "fp8") + " is not planned yet",
                "absorbed MLA decoding: bf16 / fp16 over a KV cache (\"kv_cache\": \"paged\" or \"lengths\") or contiguous keys, with a mask");
  if (s.aux_grad && !s.variants.alibi && !s.variants.relative_bias)
    diags.error("SPEC0234", at("/aux_grad"), "aux_grad without an fp32 auxiliary input: nothing to differentiate",
                "give \"variants\": {\"alibi\": true} or {\"relative_bias\": NB}, or remove \"aux_grad\"");
  if (s.aux_grad && s.deterministic)
    diags.error("SPEC0235", at("/aux_grad"),
                "aux_grad with deterministic: the gradients of the slopes / the table are added with atomics, in no fixed order",
                "remove one of them: deterministic dQ, dK, dV with constant slopes / table, or learnable ones without "
                "bit-identical gradients");

  // Problem size.
  if (s.problem) {
    const ProblemSize& p = *s.problem;
    if (p.batch <= 0 || p.seqlen_q <= 0 || p.seqlen_k <= 0) {
      diags.error("SPEC0209", at("/problem"),
                  "problem sizes must be positive, got batch = " + std::to_string(p.batch) +
                      ", seqlen_q = " + std::to_string(p.seqlen_q) + ", seqlen_k = " + std::to_string(p.seqlen_k),
                  "e.g. \"problem\": {\"batch\": 4, \"seqlen\": 4096}");
    } else {
      // Bottom-right aligned causal/window masks leave the first rows without any key when
      // seqlen_q > seqlen_k (row i sees keys up to i + seqlen_k - seqlen_q + right).
      int right = s.mask.kind == MaskKind::Window ? s.mask.window_right : 0;
      long empty = s.mask.kind == MaskKind::None || s.mask.kind == MaskKind::CausalTopLeft || right < 0
                       ? 0
                       : long(p.seqlen_q) - p.seqlen_k - right;
      if (empty > 0) {
        diags.warning("SPEC0210", at("/problem"),
                      "seqlen_q = " + std::to_string(p.seqlen_q) + " > seqlen_k = " + std::to_string(p.seqlen_k) +
                          " with a bottom-right aligned mask: the first " + std::to_string(empty) +
                          " query rows see no key (their output is 0 and their lse -inf)",
                      s.mask.kind == MaskKind::Causal
                          ? "use \"align\": \"top_left\" if row 0 should see key 0"
                          : "make seqlen_k >= seqlen_q");
      }
    }
  }
  return diags.error_count() == before;
}

}  // namespace qattn::spec
