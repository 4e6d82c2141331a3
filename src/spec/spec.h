// AttentionSpec: what attention operator to generate (heads, head dims, dtype, mask, layout,
// target GPU), its JSON format, its target-independent checks, named presets for real models,
// and the CLI-flag overrides. The format and every rule are documented in docs/spec.md.
// Nothing here throws: every bad input becomes a diagnostic (SPEC01xx parse, SPEC02xx check).
// Target-aware checks (bf16 on Turing, fp8 on Ampere, ...) live in hw/target.h.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qattn/kinds.h"
#include "support/diag.h"

namespace qattn::spec {

using support::DiagSink;
using support::SrcLoc;

// The mask kinds and dtypes are the pipeline's one vocabulary (include/qattn/kinds.h); to_string()
// of either is qattn::to_string.
using DType = qattn::DType;
using MaskKind = qattn::MaskKind;
using qattn::to_string;

// Element type of Q, K and V: F16, BF16 or F8E4M3 (validate() rejects the others). O is written in
// the same type, except for fp8_e4m3 where O is bf16 (the FlashAttention-3 convention).
// Accumulation is always fp32. JSON and CLI spelling: to_string(), "fp16", "bf16", "fp8_e4m3".
std::optional<DType> parse_dtype(std::string_view s);   // those three only; also accepts "e4m3", "fp8", case-insensitive
int dtype_bytes(DType t);                               // 2, 2, 1 (4 for fp32 / int32)

// Which keys a query row may see. Coordinates: query row i in [0, seqlen_q), key column j in
// [0, seqlen_k); off = seqlen_k - seqlen_q.
//   None:          every key.
//   Causal:        j <= i + off (bottom-right aligned).
//   CausalTopLeft: j <= i (JSON: kind "causal" with "align": "top_left").
//   Window:        i + off - window_left <= j <= i + off + window_right (always bottom-right
//                  aligned; window_right = 0 is causal sliding-window attention, e.g. Mistral;
//                  -1 on a side: no limit there). Kernels take the window at launch (one kernel
//                  serves every window); the spec's values are the ones verified and timed.
// Bounds and Named are not spec masks (validate() rejects them).
struct Mask {
  MaskKind kind = MaskKind::None;
  int window_left = 0;               // Window only, >= 0 or -1 (unbounded)
  int window_right = 0;              // Window only, >= 0 or -1 (unbounded)
  bool operator==(const Mask&) const = default;
};
std::string describe(const Mask& m);    // "causal", "causal (top-left)", "window(256,0)", "none"

enum class Layout { BSHD, BHSD };       // memory order of Q/K/V/O: (batch, seq, head, dim) or (b, h, s, d)
const char* to_string(Layout l);        // "bshd", "bhsd"
std::optional<Layout> parse_layout(std::string_view s);

// A KV cache (docs/spec.md "KV caches", docs/tl.md "KV caches"): the keys and values of each
// sequence are the first cache_seqlens[b] rows of a cache (lengths), read through a block table of
// pages (paged: the vLLM / FlashAttention layout (num_pages, page_size, heads_kv, d)).
enum class KvCache { None, Lengths, Paged };
const char* to_string(KvCache k);       // "none", "lengths", "paged"
std::optional<KvCache> parse_kv_cache(std::string_view s);

// FP8 scaling: when a flag is true the kernel takes one fp32 *descale* factor for that tensor as a
// runtime argument (a device pointer to one float, per tensor, FA3-style q/k/v_descale), and applies
// it in fp32: S = (Q K^T) * descale_q * descale_k * softmax_scale, O = (P V) * descale_v.
// The values are runtime data, not part of the spec. Only meaningful for dtype fp8_e4m3.
struct Fp8Scales {
  bool descale_q = false;
  bool descale_k = false;
  bool descale_v = false;
  bool any() const { return descale_q || descale_k || descale_v; }
  bool operator==(const Fp8Scales&) const = default;
};

// Default problem size for benchmarking / verification runs (the kernel itself is seqlen-generic).
struct ProblemSize {
  int batch = 1;
  int seqlen_q = 1;
  int seqlen_k = 1;
  bool operator==(const ProblemSize&) const = default;
};

// Attention variants (docs/spec.md "Variants"): score modifications and extra masks on top of
// `mask`, each lowered as a TL `Score` / `Mask` declaration. Score modifications apply to
// s = softmax_scale * q.k in this order: alibi, relative_bias, score_mod, softcap; a key is
// visible when `mask`, prefix_lm, document and mask_mod all keep it.
struct Variants {
  std::optional<double> softcap;      // s' = c * tanh(s / c)   (Gemma-2 / Grok logit softcapping), c > 0
  bool alibi = false;                 // s' = s - slope[h] * |q + off - k|, slopes: aux (heads_q) fp32
  std::optional<int> prefix_lm;       // P: keys k <= q + off or k < P visible (needs mask "none")
  bool document = false;              // packed sequences: keys with seg_k[b, k] == seg_q[b, q] visible
  std::optional<int> relative_bias;   // NB buckets (even): s' = s + table[h, clamp(k - q - off, -NB/2, NB/2-1) + NB/2]
  std::string score_mod;              // a TL expression over score, q_idx, kv_idx, b, head, ... ("" none)
  std::string mask_mod;               // a TL predicate over q_idx, kv_idx, b, head, ... ("" none)

  bool any() const { return any_score() || any_mask(); }
  bool any_score() const { return softcap || alibi || relative_bias || !score_mod.empty(); }
  bool any_mask() const { return prefix_lm || document || !mask_mod.empty(); }
  bool custom() const { return !score_mod.empty() || !mask_mod.empty(); }  // TL text the spec cannot evaluate
  bool operator==(const Variants&) const = default;
};
// "softcap 30, alibi, prefix-LM 64, document, relative bias 32 buckets, score_mod, mask_mod"; "" when none.
std::string describe(const Variants& v);

struct AttentionSpec {
  std::string name;                     // free text; presets use their preset name
  int heads_q = 0;                      // query heads
  int heads_kv = 0;                     // key/value heads: == heads_q MHA, divides heads_q GQA, 1 MQA
  int head_dim_qk = 0;                  // head dim of Q and K
  int head_dim_v = 0;                   // head dim of V and O (< head_dim_qk for MLA prefill)
  DType dtype = DType::BF16;
  Fp8Scales fp8;                        // only with dtype fp8_e4m3
  Mask mask;
  Variants variants;                    // score modifications and extra masks (none by default)
  std::optional<double> softmax_scale;  // absent: 1/sqrt(head_dim_qk)
  Layout layout = Layout::BSHD;
  bool return_lse = false;              // also write the row log-sum-exp (fp32, (batch, heads_q, seqlen_q))
  KvCache kv_cache = KvCache::None;     // keys and values in a cache: per-sequence lengths, pages
  bool varlen = false;                  // packed ragged batches (cu_seqlens_q / cu_seqlens_k, flash_attn_varlen_func)
  bool deterministic = false;           // the backward's sums in a fixed order: bit-identical gradients (`{ordered}`)
  bool aux_grad = false;                // the backward also writes the gradients of the fp32 auxiliary inputs (`Compute Gradient`)
  bool split_keys = false;              // the forward writes the parts of split keys (TL `s = 0: splits`; with the LSE)
  bool v_from_k = false;                // V is the first head_dim_v columns of K (DeepSeek's absorbed MLA: one latent cache, d_qk 576)
  std::string gpu;                      // target GPU name or alias ("h100", "sm80"); empty: detect
  std::optional<ProblemSize> problem;

  bool operator==(const AttentionSpec&) const = default;
};

double effective_softmax_scale(const AttentionSpec& s);  // softmax_scale or 1/sqrt(head_dim_qk)
int group_size(const AttentionSpec& s);                  // heads_q / heads_kv (0 if heads_kv <= 0)
// "MHA", "GQA", "MQA", or "MLA" when head_dim_qk > head_dim_v (e.g. "MLA" for 128/128/192/128); a wider V
// (head_dim_v > head_dim_qk) names its heads.
std::string variant_name(const AttentionSpec& s);
// One line: "llama3-8b: GQA 32/8 heads, d 128, bf16, causal, bshd".
std::string summary(const AttentionSpec& s);

// Head dims the generator supports (for head_dim_qk and head_dim_v).
const std::vector<int>& supported_head_dims();

// ---- JSON ---------------------------------------------------------------------------------
// Where each JSON member was written (JSON pointer -> line:col of its key), filled by parse_json
// so later checks can point at the offending line. Absent pointers give SrcLoc{} (no location).
struct SourceMap {
  std::map<std::string, SrcLoc> where;
  SrcLoc at(const std::string& pointer) const;
};

// Parse spec JSON text. Strict: unknown keys, wrong types, bad enum values and malformed JSON are
// diagnostics (SPEC01xx) located at line:col with the JSON pointer in the message. Accepts the
// shorthands documented in docs/spec.md ("preset" base, "head_dim", mask as a string, "seqlen").
// A window mask with "align": "top_left" has no Mask to become: SPEC0206 here.
// Returns nullopt on any error. Does not run validate().
std::optional<AttentionSpec> parse_json(std::string_view text, DiagSink& diags, SourceMap* where = nullptr);
// Read and parse a file (SPEC0101 if it cannot be read); sets diags' file name to `path`.
std::optional<AttentionSpec> load_json_file(const std::string& path, DiagSink& diags, SourceMap* where = nullptr);
// Canonical JSON text (2-space indent, trailing newline). parse_json(to_json(s)) == s.
std::string to_json(const AttentionSpec& s);

// ---- checks -------------------------------------------------------------------------------
// Target-independent checks (SPEC02xx). Errors and warnings go to `diags`, located via `where`
// when the spec came from a file. Returns true when there is no error.
bool validate(const AttentionSpec& s, DiagSink& diags, const SourceMap* where = nullptr);

// ---- presets ------------------------------------------------------------------------------
struct Preset {
  AttentionSpec spec;        // spec.name is the preset name
  std::string description;   // one line
  std::string source;        // where the numbers come from (model config)
};
const std::vector<Preset>& presets();
// Case-insensitive; '-', '_', ' ' are ignored ("Llama3_8B" finds "llama3-8b"). nullptr if unknown.
const AttentionSpec* find_preset(std::string_view name);
// Same, and reports SPEC0110 (listing presets, with a did-you-mean) when unknown.
const AttentionSpec* find_preset(std::string_view name, DiagSink& diags);

// ---- CLI flags ----------------------------------------------------------------------------
// Override fields from command-line flags (keys without dashes): name, dtype, mask
// (none|causal|causal_top_left|window), window ("L,R"; implies mask window), heads ("Q/KV" or "Q"),
// head-dim ("D" or "QK/V"), layout, softmax-scale, lse (true/false), gpu, batch,
// seqlen ("S" or "SQ/SK"), descale ("q,k,v" subset or "none"), softcap (C or "none"), alibi,
// prefix-lm (P or "none"), document, relative-bias (NB or "none"), score-mod / mask-mod (a TL
// expression, "" clears). Boolean flags (lse, alibi, document) take true/false or no value (true).
// Bad values: SPEC0120; unknown flags: SPEC0121. Returns true when no error was reported.
bool apply_flags(AttentionSpec& s, const std::map<std::string, std::string>& flags, DiagSink& diags);
// The flag names apply_flags understands, in documentation order.
const std::vector<std::string>& flag_names();
// Whether a flag may be given without a value (`--alibi` means `--alibi true`).
bool flag_is_boolean(std::string_view name);

// The CLI's whole recipe: start from --preset or --spec FILE (SPEC0122 if both or neither), apply
// the flag overrides, then validate(). Returns nullopt when any error was reported.
std::optional<AttentionSpec> spec_from_cli(const std::string& preset, const std::string& spec_file,
                                           const std::map<std::string, std::string>& flags,
                                           DiagSink& diags);

// ---- the spec's name ----------------------------------------------------------------------
// A name is empty (unnamed) or a safe identifier: 1 to kMaxNameLength characters from A-Z a-z 0-9
// '.' '_' '-', starting with a letter or a digit, with no "..". It names the artifacts folder
// (artifacts/<name>-<gpu>) and appears in TL comments and reports, so it may hold no path
// separator, line break, quote or other shell or TL syntax. validate() reports others (SPEC0217).
constexpr size_t kMaxNameLength = 128;
bool is_safe_name(std::string_view name);
// `name` made safe for every use (a folder name, a line of text): unchanged when is_safe_name,
// else each character outside the set and the second '.' of ".." becomes '_', a leading
// non-alphanumeric character gets an 'n' before it, and it is cut at kMaxNameLength. "" stays "".
std::string safe_name(std::string_view name);

// ---- small name helpers (shared with hw/) ------------------------------------------------
// Lower-case and drop '-', '_', ' ': the key names are compared by.
std::string name_key(std::string_view s);
// The candidate closest to `s` by edit distance on name_key, or "" if none is close.
std::string closest_name(std::string_view s, const std::vector<std::string>& candidates);
std::string join(const std::vector<std::string>& parts, std::string_view sep = ", ");

}  // namespace qattn::spec
