// AttentionSpec <-> JSON. Reading is strict (unknown keys, wrong types, bad enum values are
// SPEC01xx diagnostics) and located: a small scanner maps every JSON pointer to the line:col of its
// key, and nlohmann's parse errors are turned from a byte offset into line:col. Never throws.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <sstream>

#include "spec/spec.h"
#include "support/bounded_io.h"

namespace qattn::spec {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// ---- locations ----------------------------------------------------------------------------
SrcLoc loc_of_offset(std::string_view text, size_t off) {
  SrcLoc loc{1, 1};
  for (size_t i = 0; i < off && i < text.size(); ++i) {
    if (text[i] == '\n') loc.line++, loc.col = 1;
    else loc.col++;
  }
  return loc;
}

std::string escape_pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// Walks JSON text that nlohmann already accepted (comments allowed) and records, for each member,
// the location of its key under its JSON pointer, and duplicate keys. Bounds-checked throughout,
// and depth-limited, so it cannot crash even if the text were not valid.
class LocationScanner {
 public:
  LocationScanner(std::string_view t, std::map<std::string, SrcLoc>& out,
                  std::vector<std::pair<std::string, SrcLoc>>& dups)
      : t_(t), out_(out), dups_(dups) {}
  void run() { value("", 0); }

 private:
  std::string_view t_;
  size_t i_ = 0;
  std::map<std::string, SrcLoc>& out_;
  std::vector<std::pair<std::string, SrcLoc>>& dups_;
  int line_ = 1, col_ = 1;

  bool eof() const { return i_ >= t_.size(); }
  void adv() {
    if (eof()) return;
    if (t_[i_] == '\n') line_++, col_ = 1;
    else col_++;
    ++i_;
  }
  void ws() {
    while (!eof()) {
      char c = t_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        adv();
      } else if (c == '/' && i_ + 1 < t_.size() && t_[i_ + 1] == '/') {
        while (!eof() && t_[i_] != '\n') adv();
      } else if (c == '/' && i_ + 1 < t_.size() && t_[i_ + 1] == '*') {
        adv(), adv();
        while (!eof() && !(t_[i_] == '*' && i_ + 1 < t_.size() && t_[i_ + 1] == '/')) adv();
        adv(), adv();
      } else {
        break;
      }
    }
  }
  static void put_utf8(std::string& s, unsigned cp) {
    if (cp < 0x80) s += char(cp);
    else if (cp < 0x800) s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    else if (cp < 0x10000)
      s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
    else
      s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F)),
          s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
  }
  unsigned hex4() {
    unsigned v = 0;
    for (int k = 0; k < 4 && !eof(); ++k) {
      char c = t_[i_];
      v = v * 16 + unsigned(c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0');
      adv();
    }
    return v;
  }
  std::string str() {  // at '"'
    std::string s;
    adv();
    while (!eof() && t_[i_] != '"') {
      if (t_[i_] == '\\') {
        adv();
        if (eof()) break;
        char e = t_[i_];
        adv();
        switch (e) {
          case 'n': s += '\n'; break;
          case 't': s += '\t'; break;
          case 'r': s += '\r'; break;
          case 'b': s += '\b'; break;
          case 'f': s += '\f'; break;
          case 'u': {
            unsigned cp = hex4();
            if (cp >= 0xD800 && cp < 0xDC00 && i_ + 1 < t_.size() && t_[i_] == '\\' && t_[i_ + 1] == 'u') {
              adv(), adv();
              unsigned lo = hex4();
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(s, cp);
            break;
          }
          default: s += e;
        }
      } else {
        s += t_[i_];
        adv();
      }
    }
    adv();  // closing quote
    return s;
  }
  void value(const std::string& ptr, int depth) {
    ws();
    if (eof() || depth > 64) return;
    char c = t_[i_];
    if (c == '{') {
      adv();
      std::map<std::string, bool> seen;
      while (true) {
        ws();
        if (eof() || t_[i_] == '}') break;
        if (t_[i_] != '"') return;
        SrcLoc key_loc{line_, col_};
        std::string key = str();
        std::string child = ptr + "/" + escape_pointer_token(key);
        if (seen[key]) dups_.push_back({child, key_loc});
        seen[key] = true;
        out_[child] = key_loc;
        ws();
        if (!eof() && t_[i_] == ':') adv();
        value(child, depth + 1);
        ws();
        if (!eof() && t_[i_] == ',') adv();
        else break;
      }
      ws();
      adv();  // '}'
    } else if (c == '[') {
      adv();
      for (int n = 0;; ++n) {
        ws();
        if (eof() || t_[i_] == ']') break;
        std::string child = ptr + "/" + std::to_string(n);
        out_[child] = SrcLoc{line_, col_};
        value(child, depth + 1);
        ws();
        if (!eof() && t_[i_] == ',') adv();
        else break;
      }
      ws();
      adv();  // ']'
    } else if (c == '"') {
      str();
    } else {
      while (!eof() && std::string_view(",]} \t\r\n/").find(t_[i_]) == std::string_view::npos) adv();
    }
  }
};

// ---- the reader ---------------------------------------------------------------------------
std::string short_dump(const json& j) {
  if (j.is_object()) return "{...}";  // never dump containers: they may be deeply nested
  if (j.is_array()) return "[...]";
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string pretty_pointer(const std::string& p) { return p.empty() ? std::string("/") : p; }

class Reader {
 public:
  Reader(DiagSink& d, const SourceMap& m) : diags_(d), map_(m) {}

  SrcLoc at(const std::string& ptr) const { return map_.at(ptr); }

  void error(const std::string& code, const std::string& ptr, const std::string& msg,
             const std::string& hint = {}) {
    diags_.error(code, at(ptr), pretty_pointer(ptr) + ": " + msg, hint);
  }

  // An object whose keys must all be in `allowed`. Unknown keys are reported (SPEC0104) but do not
  // stop reading, so one run shows every problem; returns false only when `j` is not an object.
  bool object(const json& j, const std::string& ptr, const std::vector<std::string>& allowed,
              const std::string& what) {
    if (!j.is_object()) {
      error(ptr.empty() ? "SPEC0103" : "SPEC0105", ptr,
            "expected " + what + " (a JSON object), got " + j.type_name() + " " + short_dump(j));
      return false;
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (std::find(allowed.begin(), allowed.end(), it.key()) != allowed.end()) continue;
      std::string near = closest_name(it.key(), allowed);
      std::string hint = (near.empty() ? std::string() : "did you mean \"" + near + "\"? ") +
                         "valid keys in " + what + ": " + join(allowed);
      error("SPEC0104", ptr + "/" + escape_pointer_token(it.key()), "unknown key \"" + it.key() + "\"", hint);
    }
    return true;
  }

  bool get_int(const json& obj, const std::string& key, const std::string& ptr, int& out) {
    const json& v = obj.at(key);
    std::string p = ptr + "/" + key;
    if (!v.is_number_integer()) {
      error("SPEC0105", p, "expected an integer, got " + std::string(v.type_name()) + " " + short_dump(v));
      return false;
    }
    bool fits = v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::uint64_t(INT_MAX)
                                       : v.get<std::int64_t>() >= INT_MIN && v.get<std::int64_t>() <= INT_MAX;
    if (!fits) {
      error("SPEC0109", p, "integer " + short_dump(v) + " is out of range");
      return false;
    }
    out = int(v.get<std::int64_t>());
    return true;
  }

  bool get_bool(const json& obj, const std::string& key, const std::string& ptr, bool& out) {
    const json& v = obj.at(key);
    if (!v.is_boolean()) {
      error("SPEC0105", ptr + "/" + key,
            "expected true or false, got " + std::string(v.type_name()) + " " + short_dump(v));
      return false;
    }
    out = v.get<bool>();
    return true;
  }

  bool get_string(const json& obj, const std::string& key, const std::string& ptr, std::string& out) {
    const json& v = obj.at(key);
    if (!v.is_string()) {
      error("SPEC0105", ptr + "/" + key,
            "expected a string, got " + std::string(v.type_name()) + " " + short_dump(v));
      return false;
    }
    out = v.get<std::string>();
    return true;
  }

  void bad_value(const std::string& ptr, const std::string& got, const std::vector<std::string>& valid) {
    std::string near = closest_name(got, valid);
    error("SPEC0107", ptr, "invalid value \"" + got + "\"",
          (near.empty() ? std::string() : "did you mean \"" + near + "\"? ") + "valid values: " + join(valid));
  }

  DiagSink& diags_;
  const SourceMap& map_;
};

const std::vector<std::string> kTopKeys{"name",  "preset",  "heads_q",       "heads_kv", "head_dim",
                                        "head_dim_qk", "head_dim_v", "dtype", "fp8", "mask",
                                        "variants", "softmax_scale", "layout", "return_lse", "kv_cache", "varlen", "deterministic", "aux_grad", "split_keys", "v_from_k", "gpu", "problem"};
const std::vector<std::string> kDTypes{"fp16", "bf16", "fp8_e4m3"};
const std::vector<std::string> kMaskStrings{"none", "causal", "causal_top_left"};
const std::vector<std::string> kMaskKinds{"none", "causal", "window"};

void read_mask(Reader& r, const json& j, AttentionSpec& s) {
  const std::string p = "/mask";
  if (j.is_string()) {
    std::string k = name_key(j.get<std::string>());
    if (k == "none") s.mask = Mask{};
    else if (k == "causal") s.mask = Mask{MaskKind::Causal};
    else if (k == "causaltopleft") s.mask = Mask{MaskKind::CausalTopLeft};
    else if (k == "window")
      r.error("SPEC0107", p, "a window mask needs its sizes",
              "write \"mask\": {\"kind\": \"window\", \"left\": 4095, \"right\": 0}");
    else r.bad_value(p, j.get<std::string>(), kMaskStrings);
    return;
  }
  if (!r.object(j, p, {"kind", "align", "left", "right"}, "mask")) return;
  if (!j.contains("kind")) {
    r.error("SPEC0106", p, "missing required key \"kind\"", "valid kinds: " + join(kMaskKinds));
    return;
  }
  std::string kind;
  if (!r.get_string(j, "kind", p, kind)) return;
  Mask m;
  std::string k = name_key(kind);
  if (k == "none") m.kind = MaskKind::None;
  else if (k == "causal") m.kind = MaskKind::Causal;
  else if (k == "window") m.kind = MaskKind::Window;
  else return r.bad_value(p + "/kind", kind, kMaskKinds);
  bool top_left = false;  // "align": "top_left" (causal: MaskKind::CausalTopLeft; window: SPEC0206)
  if (j.contains("align")) {
    std::string a;
    if (!r.get_string(j, "align", p, a)) return;
    if (name_key(a) == "bottomright") top_left = false;
    else if (name_key(a) == "topleft") top_left = true;
    else return r.bad_value(p + "/align", a, {"bottom_right", "top_left"});
    if (m.kind == MaskKind::None) {
      r.error("SPEC0104", p + "/align", "\"align\" has no meaning for kind \"none\"", "remove it");
      return;
    }
  }
  if (m.kind == MaskKind::Window) {
    for (const char* key : {"left", "right"})
      if (!j.contains(key)) {
        r.error("SPEC0106", p, std::string("missing required key \"") + key + "\" for a window mask",
                "e.g. {\"kind\": \"window\", \"left\": 4095, \"right\": 0}");
        return;
      }
    if (!r.get_int(j, "left", p, m.window_left) || !r.get_int(j, "right", p, m.window_right)) return;
  } else {
    for (const char* key : {"left", "right"})
      if (j.contains(key)) {
        r.error("SPEC0104", p + "/" + key, std::string("\"") + key + "\" is only valid for kind \"window\"",
                "remove it, or use \"kind\": \"window\"");
        return;
      }
  }
  if (top_left && m.kind == MaskKind::Window) {
    r.diags_.error("SPEC0206", r.at(p),
                   "window masks are always bottom-right aligned; align \"top_left\" is only for causal",
                   "remove \"align\" from the window mask");
    return;
  }
  if (top_left) m.kind = MaskKind::CausalTopLeft;
  s.mask = m;
}

void read_problem(Reader& r, const json& j, AttentionSpec& s) {
  const std::string p = "/problem";
  if (!r.object(j, p, {"batch", "seqlen", "seqlen_q", "seqlen_k"}, "problem")) return;
  ProblemSize ps;
  if (j.contains("batch") && !r.get_int(j, "batch", p, ps.batch)) return;
  if (j.contains("seqlen") && (j.contains("seqlen_q") || j.contains("seqlen_k"))) {
    r.error("SPEC0108", p + "/seqlen", "\"seqlen\" conflicts with \"seqlen_q\"/\"seqlen_k\"",
            "use either \"seqlen\" (both lengths) or \"seqlen_q\" and \"seqlen_k\"");
    return;
  }
  if (j.contains("seqlen")) {
    if (!r.get_int(j, "seqlen", p, ps.seqlen_q)) return;
    ps.seqlen_k = ps.seqlen_q;
  } else if (j.contains("seqlen_q")) {
    if (!r.get_int(j, "seqlen_q", p, ps.seqlen_q)) return;
    ps.seqlen_k = ps.seqlen_q;
    if (j.contains("seqlen_k") && !r.get_int(j, "seqlen_k", p, ps.seqlen_k)) return;
  } else {
    r.error("SPEC0106", p, "missing required key \"seqlen\" (or \"seqlen_q\")",
            "e.g. \"problem\": {\"batch\": 4, \"seqlen\": 4096}");
    return;
  }
  s.problem = ps;
}

const std::vector<std::string> kVariantKeys{"softcap", "alibi",    "prefix_lm", "document",
                                            "relative_bias", "score_mod", "mask_mod"};

// "variants": {"softcap": 30, "alibi": true, "prefix_lm": 64, "document": true, "relative_bias": 32,
//              "score_mod": "TL expression", "mask_mod": "TL predicate"}; null means absent for the
// optional numbers. Ranges are checked by validate() (SPEC0212-0216).
void read_variants(Reader& r, const json& j, AttentionSpec& s) {
  const std::string p = "/variants";
  if (!r.object(j, p, kVariantKeys, "variants")) return;
  Variants v;
  bool ok = true;
  if (j.contains("softcap")) {
    const json& c = j.at("softcap");
    if (c.is_null()) v.softcap.reset();
    else if (c.is_number()) v.softcap = c.get<double>();
    else {
      r.error("SPEC0105", p + "/softcap",
              "expected a number or null, got " + std::string(c.type_name()) + " " + short_dump(c), "e.g. \"softcap\": 30");
      ok = false;
    }
  }
  auto opt_int = [&](const char* key, std::optional<int>& out) {
    if (!j.contains(key)) return;
    if (j.at(key).is_null()) {
      out.reset();
      return;
    }
    int x = 0;
    if (r.get_int(j, key, p, x)) out = x;
    else ok = false;
  };
  opt_int("prefix_lm", v.prefix_lm);
  opt_int("relative_bias", v.relative_bias);
  if (j.contains("alibi")) ok = r.get_bool(j, "alibi", p, v.alibi) && ok;
  if (j.contains("document")) ok = r.get_bool(j, "document", p, v.document) && ok;
  if (j.contains("score_mod")) ok = r.get_string(j, "score_mod", p, v.score_mod) && ok;
  if (j.contains("mask_mod")) ok = r.get_string(j, "mask_mod", p, v.mask_mod) && ok;
  if (ok) s.variants = v;
}

void read_fp8(Reader& r, const json& j, AttentionSpec& s) {
  const std::string p = "/fp8";
  if (!r.object(j, p, {"descale_q", "descale_k", "descale_v"}, "fp8")) return;
  Fp8Scales f;
  if (j.contains("descale_q") && !r.get_bool(j, "descale_q", p, f.descale_q)) return;
  if (j.contains("descale_k") && !r.get_bool(j, "descale_k", p, f.descale_k)) return;
  if (j.contains("descale_v") && !r.get_bool(j, "descale_v", p, f.descale_v)) return;
  s.fp8 = f;
}

std::optional<AttentionSpec> read_spec(Reader& r, const json& j) {
  int errors_before = r.diags_.error_count();
  if (!r.object(j, "", kTopKeys, "an attention spec")) return std::nullopt;
  AttentionSpec s;
  bool from_preset = false;
  if (j.contains("preset")) {
    std::string name;
    if (r.get_string(j, "preset", "", name)) {
      DiagSink tmp;
      if (const AttentionSpec* base = find_preset(name, tmp)) {
        s = *base;
        from_preset = true;
      } else {
        for (const auto& d : tmp.all()) r.error(d.code, "/preset", d.message, d.hint);
      }
    }
  }
  if (j.contains("name")) r.get_string(j, "name", "", s.name);
  if (j.contains("heads_q")) r.get_int(j, "heads_q", "", s.heads_q);
  else if (!from_preset)
    r.error("SPEC0106", "", "missing required key \"heads_q\"", "or start from a preset: \"preset\": \"llama3-8b\"");
  if (j.contains("heads_kv")) r.get_int(j, "heads_kv", "", s.heads_kv);
  else if (!from_preset) s.heads_kv = s.heads_q;

  if (j.contains("head_dim") && (j.contains("head_dim_qk") || j.contains("head_dim_v"))) {
    r.error("SPEC0108", "/head_dim", "\"head_dim\" conflicts with \"head_dim_qk\"/\"head_dim_v\"",
            "use \"head_dim\" when both are equal, or \"head_dim_qk\" and \"head_dim_v\"");
  } else if (j.contains("head_dim")) {
    if (r.get_int(j, "head_dim", "", s.head_dim_qk)) s.head_dim_v = s.head_dim_qk;
  } else if (j.contains("head_dim_qk")) {
    if (r.get_int(j, "head_dim_qk", "", s.head_dim_qk) && !from_preset) s.head_dim_v = s.head_dim_qk;
    if (j.contains("head_dim_v")) r.get_int(j, "head_dim_v", "", s.head_dim_v);
  } else if (!from_preset) {
    r.error("SPEC0106", "", "missing required key \"head_dim\" (or \"head_dim_qk\")",
            "e.g. \"head_dim\": 128");
  } else if (j.contains("head_dim_v")) {
    r.get_int(j, "head_dim_v", "", s.head_dim_v);
  }

  if (j.contains("dtype")) {
    std::string d;
    if (r.get_string(j, "dtype", "", d)) {
      if (auto t = parse_dtype(d)) s.dtype = *t;
      else r.bad_value("/dtype", d, kDTypes);
    }
  }
  if (j.contains("fp8")) read_fp8(r, j.at("fp8"), s);
  if (j.contains("mask")) read_mask(r, j.at("mask"), s);
  if (j.contains("variants")) read_variants(r, j.at("variants"), s);
  if (j.contains("softmax_scale")) {
    const json& v = j.at("softmax_scale");
    if (v.is_null()) s.softmax_scale.reset();
    else if (v.is_number()) s.softmax_scale = v.get<double>();
    else
      r.error("SPEC0105", "/softmax_scale",
              "expected a number or null, got " + std::string(v.type_name()) + " " + short_dump(v));
  }
  if (j.contains("layout")) {
    std::string l;
    if (r.get_string(j, "layout", "", l)) {
      if (auto v = parse_layout(l)) s.layout = *v;
      else r.bad_value("/layout", l, {"bshd", "bhsd"});
    }
  }
  if (j.contains("return_lse")) r.get_bool(j, "return_lse", "", s.return_lse);
  if (j.contains("deterministic")) r.get_bool(j, "deterministic", "", s.deterministic);
  if (j.contains("aux_grad")) r.get_bool(j, "aux_grad", "", s.aux_grad);
  if (j.contains("kv_cache")) {
    std::string k;
    if (r.get_string(j, "kv_cache", "", k)) {
      if (auto v = parse_kv_cache(k)) s.kv_cache = *v;
      else r.bad_value("/kv_cache", k, {"none", "lengths", "paged"});
    }
  }
  if (j.contains("varlen")) r.get_bool(j, "varlen", "", s.varlen);
  if (j.contains("split_keys")) r.get_bool(j, "split_keys", "", s.split_keys);
  if (j.contains("v_from_k")) r.get_bool(j, "v_from_k", "", s.v_from_k);
  if (j.contains("gpu")) r.get_string(j, "gpu", "", s.gpu);
  if (j.contains("problem")) read_problem(r, j.at("problem"), s);
  if (r.diags_.error_count() != errors_before) return std::nullopt;
  return s;
}

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 2: msg";
// keep only "msg" (we print our own location).
std::string clean_parse_message(const std::string& what) {
  size_t p = what.find(": ");
  std::string m = p == std::string::npos ? what : what.substr(p + 2);
  if (m.rfind("syntax error while parsing value - ", 0) == 0) m = m.substr(35);
  return m;
}

}  // namespace

std::optional<AttentionSpec> parse_json(std::string_view text, DiagSink& diags, SourceMap* where) {
  if (text.size() > support::kMaxSpecBytes) {  // a spec is a few hundred bytes; the JSON tree costs ~10x its text
    diags.error("SPEC0112", SrcLoc{}, "the spec is " + std::to_string(text.size()) + " bytes, over the limit of " +
                                          support::size_str(support::kMaxSpecBytes),
                "a spec is a small JSON object (docs/spec.md): check that this is the file you meant");
    return std::nullopt;
  }
  json j;
  try {
    j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    size_t off = e.byte > 0 ? e.byte - 1 : 0;
    diags.error("SPEC0102", loc_of_offset(text, off), "malformed JSON: " + clean_parse_message(e.what()),
                "a spec is one JSON object; see docs/spec.md for the format");
    return std::nullopt;
  } catch (const std::exception& e) {
    diags.error("SPEC0102", SrcLoc{}, std::string("malformed JSON: ") + e.what());
    return std::nullopt;
  }
  SourceMap local;
  SourceMap& map = where ? *where : local;
  std::vector<std::pair<std::string, SrcLoc>> dups;
  LocationScanner(text, map.where, dups).run();
  for (const auto& [ptr, loc] : dups)
    diags.error("SPEC0111", loc, ptr + ": duplicate key", "each key may appear once; remove one of them");
  if (!dups.empty()) return std::nullopt;
  Reader r(diags, map);
  try {
    return read_spec(r, j);
  } catch (const std::exception& e) {  // defensive: nlohmann accessors are all guarded above
    diags.error("SPEC0105", SrcLoc{}, std::string("unexpected JSON structure: ") + e.what());
    return std::nullopt;
  }
}

std::optional<AttentionSpec> load_json_file(const std::string& path, DiagSink& diags, SourceMap* where) {
  diags.set_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.error("SPEC0101", SrcLoc{}, "cannot read spec file \"" + path + "\"",
                "check the path; a spec is a JSON file (docs/spec.md), or use --preset NAME");
    return std::nullopt;
  }
  // Reads one byte past the cap at most (a FIFO or /dev/zero cannot fill the memory); parse_json
  // reports SPEC0112 for the oversized text.
  std::string text(support::kMaxSpecBytes + 1, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  return parse_json(text, diags, where);
}

std::string to_json(const AttentionSpec& s) {
  ojson j;
  j["name"] = s.name;
  j["heads_q"] = s.heads_q;
  j["heads_kv"] = s.heads_kv;
  j["head_dim_qk"] = s.head_dim_qk;
  j["head_dim_v"] = s.head_dim_v;
  j["dtype"] = to_string(s.dtype);
  if (s.dtype == DType::F8E4M3 || s.fp8.any())
    j["fp8"] = {{"descale_q", s.fp8.descale_q}, {"descale_k", s.fp8.descale_k}, {"descale_v", s.fp8.descale_v}};
  ojson m;  // a causal mask is "kind": "causal" with its "align"
  const bool causal = s.mask.kind == MaskKind::Causal || s.mask.kind == MaskKind::CausalTopLeft;
  m["kind"] = causal ? "causal" : to_string(s.mask.kind);
  if (causal) m["align"] = s.mask.kind == MaskKind::CausalTopLeft ? "top_left" : "bottom_right";
  if (s.mask.kind == MaskKind::Window) {
    m["left"] = s.mask.window_left;
    m["right"] = s.mask.window_right;
  }
  j["mask"] = m;
  if (s.variants.any()) {
    const Variants& v = s.variants;
    ojson o;
    if (v.softcap) {
      if (std::isfinite(*v.softcap)) o["softcap"] = *v.softcap;
      else o["softcap"] = nullptr;  // not representable; validate() rejects it anyway
    }
    if (v.alibi) o["alibi"] = true;
    if (v.prefix_lm) o["prefix_lm"] = *v.prefix_lm;
    if (v.document) o["document"] = true;
    if (v.relative_bias) o["relative_bias"] = *v.relative_bias;
    if (!v.score_mod.empty()) o["score_mod"] = v.score_mod;
    if (!v.mask_mod.empty()) o["mask_mod"] = v.mask_mod;
    j["variants"] = o;
  }
  if (s.softmax_scale) {
    if (std::isfinite(*s.softmax_scale)) j["softmax_scale"] = *s.softmax_scale;
    else j["softmax_scale"] = nullptr;  // not representable in JSON; validate() rejects it anyway
  }
  j["layout"] = to_string(s.layout);
  j["return_lse"] = s.return_lse;
  if (s.kv_cache != KvCache::None) j["kv_cache"] = to_string(s.kv_cache);
  if (s.varlen) j["varlen"] = true;
  if (s.split_keys) j["split_keys"] = true;
  if (s.v_from_k) j["v_from_k"] = true;
  if (s.deterministic) j["deterministic"] = true;
  if (s.aux_grad) j["aux_grad"] = true;
  j["gpu"] = s.gpu;
  if (s.problem) {
    ojson p;
    p["batch"] = s.problem->batch;
    p["seqlen_q"] = s.problem->seqlen_q;
    p["seqlen_k"] = s.problem->seqlen_k;
    j["problem"] = p;
  }
  // Invalid UTF-8 in names must not throw: replace it.
  return j.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace qattn::spec
