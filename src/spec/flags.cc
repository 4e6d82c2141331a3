// Command-line overrides for an AttentionSpec (--dtype fp16 --heads 32/8 --window 256,0 ...) and
// the CLI's recipe: base spec from --preset or --spec FILE, then overrides, then validate().
#include <charconv>
#include <cmath>

#include "spec/spec.h"

namespace qattn::spec {

namespace {

const std::vector<std::string> kFlags{"name",      "dtype",    "mask",          "window",   "heads",    "head-dim",
                                      "layout",    "softmax-scale", "lse",    "gpu",      "batch",    "seqlen",
                                      "descale",   "softcap",  "alibi",         "prefix-lm", "document", "relative-bias",
                                      "score-mod", "mask-mod", "kv-cache", "varlen", "deterministic", "aux-grad", "split-keys", "v-from-k"};
const std::vector<std::string> kBooleanFlags{"lse", "alibi", "document"};

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// "A" or "A<sep>B" with sep one of "/", ",", ":"; returns the one or two integers.
std::optional<std::vector<int>> parse_int_pair(std::string_view s) {
  size_t cut = s.find_first_of("/,:");
  std::vector<int> out;
  auto a = parse_int(s.substr(0, cut));
  if (!a) return std::nullopt;
  out.push_back(*a);
  if (cut != std::string_view::npos) {
    auto b = parse_int(s.substr(cut + 1));
    if (!b) return std::nullopt;
    out.push_back(*b);
  }
  return out;
}

std::optional<bool> parse_bool(std::string_view s) {
  std::string k = name_key(s);
  if (k.empty() || k == "true" || k == "1" || k == "yes" || k == "on") return true;
  if (k == "false" || k == "0" || k == "no" || k == "off") return false;
  return std::nullopt;
}

std::string strip_dashes(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && s[i] == '-') ++i;
  return s.substr(i);
}

bool is_none(std::string_view s) {
  std::string k = name_key(s);
  return k == "none" || k == "off";
}

}  // namespace

const std::vector<std::string>& flag_names() { return kFlags; }

bool flag_is_boolean(std::string_view name) {
  std::string k = name_key(strip_dashes(std::string(name)));
  for (const auto& b : kBooleanFlags)
    if (name_key(b) == k) return true;
  return false;
}

bool apply_flags(AttentionSpec& s, const std::map<std::string, std::string>& flags, DiagSink& diags) {
  int before = diags.error_count();
  auto bad = [&](const std::string& flag, const std::string& value, const std::string& expect) {
    diags.error("SPEC0120", SrcLoc{}, "--" + flag + " " + value + ": invalid value", "expected " + expect);
  };
  bool window_set = false;
  bool prefix_lm_set = false;
  std::optional<MaskKind> mask_kind;
  for (const auto& [raw, value] : flags) {
    std::string flag = strip_dashes(raw);
    std::string key = name_key(flag);
    if (key == "name") {
      s.name = value;
    } else if (key == "dtype") {
      if (auto t = parse_dtype(value)) s.dtype = *t;
      else bad(flag, value, "fp16, bf16 or fp8_e4m3");
    } else if (key == "mask") {
      std::string k = name_key(value);
      if (k == "none") mask_kind = MaskKind::None;
      else if (k == "causal" || k == "causalbottomright") mask_kind = MaskKind::Causal;
      else if (k == "causaltopleft" || k == "topleft") mask_kind = MaskKind::CausalTopLeft;
      else if (k == "window" || k == "local") mask_kind = MaskKind::Window;
      else bad(flag, value, "none, causal, causal_top_left or window (with --window L,R)");
    } else if (key == "window") {
      auto v = parse_int_pair(value);
      if (!v) {
        bad(flag, value, "LEFT,RIGHT window sizes, e.g. 4096,0 (or LEFT alone for LEFT,0)");
      } else {
        s.mask.window_left = (*v)[0];
        s.mask.window_right = v->size() > 1 ? (*v)[1] : 0;
        window_set = true;
      }
    } else if (key == "heads") {
      auto v = parse_int_pair(value);
      if (!v) bad(flag, value, "HEADS_Q/HEADS_KV, e.g. 32/8 (or HEADS for MHA)");
      else s.heads_q = (*v)[0], s.heads_kv = v->size() > 1 ? (*v)[1] : (*v)[0];
    } else if (key == "headdim") {
      auto v = parse_int_pair(value);
      if (!v) bad(flag, value, "D (e.g. 128) or D_QK/D_V (e.g. 192/128)");
      else s.head_dim_qk = (*v)[0], s.head_dim_v = v->size() > 1 ? (*v)[1] : (*v)[0];
    } else if (key == "layout") {
      if (auto l = parse_layout(value)) s.layout = *l;
      else bad(flag, value, "bshd or bhsd");
    } else if (key == "softmaxscale") {
      if (name_key(value) == "default") {
        s.softmax_scale.reset();
      } else {
        char* end = nullptr;
        double d = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size()) bad(flag, value, "a number > 0, or default");
        else s.softmax_scale = d;
      }
    } else if (key == "lse" || key == "returnlse") {
      if (auto b = parse_bool(value)) s.return_lse = *b;
      else bad(flag, value, "true or false");
    } else if (key == "gpu") {
      s.gpu = value;
    } else if (key == "varlen") {
      if (auto b = parse_bool(value)) s.varlen = *b;
      else bad(flag, value, "true or false");
    } else if (key == "vfromk") {
      if (auto b = parse_bool(value)) s.v_from_k = *b;
      else bad(flag, value, "true or false");
    } else if (key == "splitkeys") {
      if (auto b = parse_bool(value)) s.split_keys = *b;
      else bad(flag, value, "true or false");
    } else if (key == "deterministic") {
      if (auto b = parse_bool(value)) s.deterministic = *b;
      else bad(flag, value, "true or false");
    } else if (key == "auxgrad") {
      if (auto b = parse_bool(value)) s.aux_grad = *b;
      else bad(flag, value, "true or false");
    } else if (key == "kvcache") {
      if (auto k = parse_kv_cache(value)) s.kv_cache = *k;
      else bad(flag, value, "none, lengths or paged");
    } else if (key == "batch") {
      auto v = parse_int(value);
      if (!v) bad(flag, value, "an integer");
      else {
        if (!s.problem) s.problem = ProblemSize{};
        s.problem->batch = *v;
      }
    } else if (key == "seqlen") {
      auto v = parse_int_pair(value);
      if (!v) bad(flag, value, "SEQLEN or SEQLEN_Q/SEQLEN_K, e.g. 4096 or 1/8192");
      else {
        if (!s.problem) s.problem = ProblemSize{};
        s.problem->seqlen_q = (*v)[0];
        s.problem->seqlen_k = v->size() > 1 ? (*v)[1] : (*v)[0];
      }
    } else if (key == "descale") {
      Fp8Scales f;
      std::string k = name_key(value);
      bool ok = true;
      if (k == "all") f = Fp8Scales{true, true, true};
      else if (k != "none")
        for (char c : k) {
          if (c == 'q') f.descale_q = true;
          else if (c == 'k') f.descale_k = true;
          else if (c == 'v') f.descale_v = true;
          else if (c != ',') ok = false;
        }
      if (ok) s.fp8 = f;
      else bad(flag, value, "a subset of q,k,v (e.g. q,k,v), all, or none");
    } else if (key == "softcap") {
      if (is_none(value)) {
        s.variants.softcap.reset();
      } else {
        char* end = nullptr;
        double d = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size()) bad(flag, value, "a number > 0 (e.g. 30), or none");
        else s.variants.softcap = d;
      }
    } else if (key == "alibi" || key == "document") {
      if (auto b = parse_bool(value)) (key == "alibi" ? s.variants.alibi : s.variants.document) = *b;
      else bad(flag, value, "true or false (or no value: true)");
    } else if (key == "prefixlm" || key == "relativebias") {
      std::optional<int>& field = key == "prefixlm" ? s.variants.prefix_lm : s.variants.relative_bias;
      if (is_none(value)) {
        field.reset();
      } else if (auto v = parse_int(value)) {
        field = *v;
        if (key == "prefixlm") prefix_lm_set = true;
      } else {
        bad(flag, value, key == "prefixlm" ? "the prefix length in keys (e.g. 64), or none"
                                           : "an even number of buckets (e.g. 32), or none");
      }
    } else if (key == "scoremod") {
      s.variants.score_mod = value;
    } else if (key == "maskmod") {
      s.variants.mask_mod = value;
    } else {
      std::string near = closest_name(flag, kFlags);
      diags.error("SPEC0121", SrcLoc{}, "unknown spec flag --" + flag,
                  (near.empty() ? std::string() : "did you mean --" + near + "? ") + "spec flags: --" +
                      join(kFlags, ", --"));
    }
  }
  if (window_set) s.mask.kind = MaskKind::Window;
  if (mask_kind) {
    if (*mask_kind == MaskKind::Window && !window_set && s.mask.kind != MaskKind::Window) {
      diags.error("SPEC0120", SrcLoc{}, "--mask window needs the window sizes", "add --window LEFT,RIGHT, e.g. --window 4096,0");
    } else if (*mask_kind != MaskKind::Window && window_set) {
      // Named by its kind as the JSON writes it: "causal" for either alignment.
      const MaskKind named = *mask_kind == MaskKind::CausalTopLeft ? MaskKind::Causal : *mask_kind;
      diags.error("SPEC0120", SrcLoc{}, std::string("--window conflicts with --mask ") + to_string(named),
                  "drop --mask (a --window implies the window mask)");
    } else {
      s.mask.kind = *mask_kind;
      if (s.mask.kind != MaskKind::Window) s.mask.window_left = s.mask.window_right = 0;
    }
  }
  // Prefix-LM replaces a causal mask (it is causal outside the prefix): `--preset llama3-8b
  // --prefix-lm 64` means what it says. An explicit --mask or --window is kept (validate() reports
  // the conflict).
  const bool causal = s.mask.kind == MaskKind::Causal || s.mask.kind == MaskKind::CausalTopLeft;
  if (prefix_lm_set && !mask_kind && !window_set && causal) s.mask = Mask{};
  return diags.error_count() == before;
}

std::optional<AttentionSpec> spec_from_cli(const std::string& preset, const std::string& spec_file,
                                           const std::map<std::string, std::string>& flags, DiagSink& diags) {
  AttentionSpec s;
  SourceMap where;
  bool have_where = false;
  if (!preset.empty() && !spec_file.empty()) {
    diags.error("SPEC0122", SrcLoc{}, "--preset and --spec are mutually exclusive",
                "use one; a spec file can start from a preset with \"preset\": \"NAME\"");
    return std::nullopt;
  }
  if (!preset.empty()) {
    const AttentionSpec* p = find_preset(preset, diags);
    if (!p) return std::nullopt;
    s = *p;
  } else if (!spec_file.empty()) {
    auto loaded = load_json_file(spec_file, diags, &where);
    if (!loaded) return std::nullopt;
    s = *loaded;
    have_where = true;
  } else {
    bool has_heads = false, has_dim = false;
    for (const auto& [k, v] : flags) {
      has_heads |= name_key(strip_dashes(k)) == "heads";
      has_dim |= name_key(strip_dashes(k)) == "headdim";
    }
    if (!has_heads || !has_dim) {
      diags.error("SPEC0122", SrcLoc{}, "no attention spec given",
                  "use --preset NAME (`qattn presets`), --spec FILE, or --heads Q/KV with --head-dim D");
      return std::nullopt;
    }
  }
  if (!apply_flags(s, flags, diags)) return std::nullopt;
  // File locations only hold for fields that no flag overrode.
  for (const auto& [k, v] : flags) {
    std::string key = name_key(strip_dashes(k));
    for (const char* ptr : {"/heads_q", "/heads_kv"}) if (key == "heads") where.where.erase(ptr);
    for (const char* ptr : {"/head_dim_qk", "/head_dim_v"}) if (key == "headdim") where.where.erase(ptr);
    if (key == "mask" || key == "window") where.where.erase("/mask");
    if (key == "softmaxscale") where.where.erase("/softmax_scale");
    if (key == "batch" || key == "seqlen") where.where.erase("/problem");
    if (key == "descale") where.where.erase("/fp8");
    if (key == "prefixlm") where.where.erase("/mask");
    for (const char* k : {"softcap", "alibi", "prefix_lm", "document", "relative_bias", "score_mod", "mask_mod"})
      if (key == name_key(k)) where.where.erase(std::string("/variants/") + k), where.where.erase("/variants");
  }
  if (!validate(s, diags, have_where ? &where : nullptr)) return std::nullopt;
  return s;
}

}  // namespace qattn::spec
