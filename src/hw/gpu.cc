// The GPU facts table: strict parsing and consistency checks of data/gpus.json (HW01xx), the
// embedded copy, and lookups by name or alias (HW0201). The driver probe is in probe.cc.
#include "hw/gpu.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <set>

namespace qattn::hw {

namespace embedded {
extern const char kGpusJson[];  // generated from data/gpus.json by cmake/embed.cmake
}

using json = nlohmann::json;
using spec::DType;

double GpuFacts::peak_tflops(DType t) const {
  auto it = tensor_tflops.find(t);
  return it == tensor_tflops.end() ? 0.0 : it->second;
}

const MmaInstr* GpuFacts::preferred_mma(DType t) const {
  auto it = mma.find(t);
  return it == mma.end() || it->second.empty() ? nullptr : &it->second.front();
}

std::string GpuFacts::dtypes_supported() const {
  std::vector<std::string> v;
  for (const auto& [t, instrs] : mma) v.push_back(spec::to_string(t));
  return spec::join(v);
}

namespace {

// Reads one table, reporting "HW01xx <pointer>: message". Values are checked before use.
struct TableReader {
  DiagSink& diags;
  bool ok = true;

  void error(const char* code, const std::string& ptr, const std::string& msg, const std::string& hint = {}) {
    diags.error(code, support::SrcLoc{}, "gpus.json " + ptr + ": " + msg, hint);
    ok = false;
  }
  void keys(const json& j, const std::string& ptr, const std::vector<std::string>& allowed, bool all_required) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end())
        error("HW0102", ptr + "/" + it.key(), "unknown key", "valid keys: " + spec::join(allowed));
    if (all_required)
      for (const auto& k : allowed)
        if (!j.contains(k)) error("HW0103", ptr, "missing key \"" + k + "\"");
  }
  int integer(const json& j, const std::string& key, const std::string& ptr, long lo = 0, long hi = INT_MAX) {
    if (!j.contains(key)) return 0;  // reported by keys()
    const json& v = j.at(key);
    if (!v.is_number_integer()) {
      error("HW0104", ptr + "/" + key, std::string("expected an integer, got ") + v.type_name());
      return 0;
    }
    long x = v.get<long>();
    if (x < lo || x > hi) {
      error("HW0105", ptr + "/" + key, std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
                                           std::to_string(hi) + "]");
      return 0;
    }
    return int(x);
  }
  double number(const json& j, const std::string& key, const std::string& ptr) {
    if (!j.contains(key)) return 0;
    const json& v = j.at(key);
    if (!v.is_number() || v.get<double>() <= 0) {
      error("HW0104", ptr + "/" + key, "expected a number > 0");
      return 0;
    }
    return v.get<double>();
  }
  std::string string(const json& j, const std::string& key, const std::string& ptr) {
    if (!j.contains(key)) return {};
    const json& v = j.at(key);
    if (!v.is_string()) {
      error("HW0104", ptr + "/" + key, std::string("expected a string, got ") + v.type_name());
      return {};
    }
    return v.get<std::string>();
  }
  bool boolean(const json& j, const std::string& key, const std::string& ptr) {
    if (!j.contains(key)) return false;
    const json& v = j.at(key);
    if (!v.is_boolean()) {
      error("HW0104", ptr + "/" + key, std::string("expected true/false, got ") + v.type_name());
      return false;
    }
    return v.get<bool>();
  }
  std::optional<DType> dtype_key(const std::string& k, const std::string& ptr) {
    auto t = spec::parse_dtype(k);
    if (!t || spec::to_string(*t) != k) {
      error("HW0102", ptr + "/" + k, "unknown dtype key", "valid: fp16, bf16, fp8_e4m3");
      return std::nullopt;
    }
    return t;
  }
};

// "mma.sync.m16n8k16" / "wgmma.m64nNk16".
std::optional<MmaInstr> parse_mma(const std::string& text) {
  size_t dot = text.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  MmaInstr m;
  m.text = text;
  m.kind = text.substr(0, dot);
  if (m.kind != "mma.sync" && m.kind != "wgmma") return std::nullopt;
  std::string shape = text.substr(dot + 1);
  size_t i = 0;
  auto num = [&](char tag, bool allow_var, int& out) {
    if (i >= shape.size() || shape[i] != tag) return false;
    ++i;
    if (allow_var && i < shape.size() && shape[i] == 'N') return ++i, out = 0, true;
    int v = 0, digits = 0;
    while (i < shape.size() && std::isdigit(static_cast<unsigned char>(shape[i])) && digits < 4)
      v = v * 10 + (shape[i++] - '0'), ++digits;
    out = v;
    return digits > 0 && v > 0;
  };
  if (!num('m', false, m.m) || !num('n', m.kind == "wgmma", m.n) || !num('k', false, m.k) || i != shape.size())
    return std::nullopt;
  return m;
}

const std::vector<std::string> kGpuKeys{
    "name", "aliases", "arch", "compute_capability", "sm_count", "smem_per_sm_bytes",
    "smem_per_block_optin_bytes", "smem_per_block_default_bytes", "regs_per_sm", "regs_per_thread_max",
    "max_threads_per_sm", "max_threads_per_block", "max_blocks_per_sm", "warp_size", "l2_bytes", "memory_gb",
    "memory_bandwidth_gbps", "boost_clock_mhz", "fp32_tflops", "tensor_tflops", "mma", "features",
    "nvcc_gencode", "notes"};
const std::vector<std::string> kFeatureKeys{"cp_async", "ldmatrix", "stmatrix", "tma", "wgmma",
                                            "setmaxnreg", "clusters", "fp8", "bf16"};

void read_gpu(TableReader& r, const json& g, const std::string& p, GpuFacts& f) {
  if (!g.is_object()) return r.error("HW0104", p, "expected an object");
  r.keys(g, p, kGpuKeys, true);
  f.name = r.string(g, "name", p);
  if (g.contains("aliases") && g.at("aliases").is_array()) {
    for (const auto& a : g.at("aliases"))
      if (a.is_string()) f.aliases.push_back(a.get<std::string>());
      else r.error("HW0104", p + "/aliases", "aliases must be strings");
  } else if (g.contains("aliases")) {
    r.error("HW0104", p + "/aliases", "expected an array of strings");
  }
  f.arch = r.string(g, "arch", p);
  if (g.contains("compute_capability")) {
    const json& cc = g.at("compute_capability");
    if (cc.is_array() && cc.size() == 2 && cc[0].is_number_integer() && cc[1].is_number_integer()) {
      f.cc_major = cc[0].get<int>();
      f.cc_minor = cc[1].get<int>();
      f.sm = 10 * f.cc_major + f.cc_minor;
    } else {
      r.error("HW0104", p + "/compute_capability", "expected [major, minor]");
    }
  }
  f.sm_count = r.integer(g, "sm_count", p, 1, 1024);
  f.smem_per_sm = r.integer(g, "smem_per_sm_bytes", p, 1);
  f.smem_per_block_optin = r.integer(g, "smem_per_block_optin_bytes", p, 1);
  f.smem_per_block_default = r.integer(g, "smem_per_block_default_bytes", p, 1);
  f.regs_per_sm = r.integer(g, "regs_per_sm", p, 1);
  f.regs_per_thread_max = r.integer(g, "regs_per_thread_max", p, 1, 255);
  f.max_threads_per_sm = r.integer(g, "max_threads_per_sm", p, 32, 4096);
  f.max_threads_per_block = r.integer(g, "max_threads_per_block", p, 32, 1024);
  f.max_blocks_per_sm = r.integer(g, "max_blocks_per_sm", p, 1, 64);
  f.warp_size = r.integer(g, "warp_size", p, 32, 32);
  if (g.contains("l2_bytes") && g.at("l2_bytes").is_number_integer() && g.at("l2_bytes").get<int64_t>() > 0)
    f.l2_bytes = g.at("l2_bytes").get<int64_t>();
  else if (g.contains("l2_bytes"))
    r.error("HW0104", p + "/l2_bytes", "expected an integer > 0");
  f.memory_gb = r.number(g, "memory_gb", p);
  f.memory_bandwidth_gbps = r.number(g, "memory_bandwidth_gbps", p);
  f.boost_clock_mhz = r.integer(g, "boost_clock_mhz", p, 100, 5000);
  f.fp32_tflops = r.number(g, "fp32_tflops", p);
  if (g.contains("tensor_tflops")) {
    const json& t = g.at("tensor_tflops");
    if (!t.is_object()) r.error("HW0104", p + "/tensor_tflops", "expected an object");
    else
      for (auto it = t.begin(); it != t.end(); ++it)
        if (auto d = r.dtype_key(it.key(), p + "/tensor_tflops"))
          f.tensor_tflops[*d] = r.number(t, it.key(), p + "/tensor_tflops");
  }
  if (g.contains("mma")) {
    const json& m = g.at("mma");
    if (!m.is_object()) r.error("HW0104", p + "/mma", "expected an object");
    else
      for (auto it = m.begin(); it != m.end(); ++it) {
        auto d = r.dtype_key(it.key(), p + "/mma");
        if (!d) continue;
        if (!it.value().is_array() || it.value().empty()) {
          r.error("HW0104", p + "/mma/" + it.key(), "expected a non-empty array of instruction names");
          continue;
        }
        for (const auto& s : it.value()) {
          auto mi = s.is_string() ? parse_mma(s.get<std::string>()) : std::nullopt;
          if (mi) f.mma[*d].push_back(*mi);
          else r.error("HW0104", p + "/mma/" + it.key(), "bad instruction " + s.dump(),
                       "write \"mma.sync.m16n8k16\" or \"wgmma.m64nNk16\"");
        }
      }
  }
  if (g.contains("features")) {
    const json& ft = g.at("features");
    if (!ft.is_object()) {
      r.error("HW0104", p + "/features", "expected an object");
    } else {
      r.keys(ft, p + "/features", kFeatureKeys, true);
      std::string q = p + "/features";
      f.features = GpuFeatures{r.boolean(ft, "cp_async", q), r.boolean(ft, "ldmatrix", q),
                               r.boolean(ft, "stmatrix", q), r.boolean(ft, "tma", q),
                               r.boolean(ft, "wgmma", q),   r.boolean(ft, "setmaxnreg", q),
                               r.boolean(ft, "clusters", q), r.boolean(ft, "fp8", q),
                               r.boolean(ft, "bf16", q)};
    }
  }
  f.nvcc_gencode = r.string(g, "nvcc_gencode", p);
  f.notes = r.string(g, "notes", p);
}

// Facts that must agree with each other; a mistake here would mislead the planner silently.
void check_gpu(TableReader& r, const GpuFacts& f, const std::string& p) {
  auto bad = [&](const std::string& msg) { r.error("HW0106", p, f.name + ": " + msg); };
  if (f.name.empty()) bad("empty name");
  if (f.arch != "sm" + std::to_string(f.sm)) bad("arch \"" + f.arch + "\" does not match compute capability");
  if (f.smem_per_block_optin > f.smem_per_sm) bad("smem per block exceeds smem per SM");
  if (f.smem_per_block_default > f.smem_per_block_optin) bad("default smem per block exceeds the opt-in maximum");
  if (f.max_threads_per_block > f.max_threads_per_sm) bad("max threads per block exceeds max threads per SM");
  if (f.max_threads_per_sm % f.warp_size != 0) bad("max threads per SM is not a whole number of warps");
  for (DType t : {DType::F16, DType::BF16, DType::F8E4M3})
    if (f.mma.count(t) != f.tensor_tflops.count(t))
      bad(std::string("mma and tensor_tflops disagree on ") + spec::to_string(t));
  if (f.features.bf16 != f.supports(DType::BF16)) bad("feature bf16 disagrees with the bf16 mma list");
  if (f.features.fp8 != f.supports(DType::F8E4M3)) bad("feature fp8 disagrees with the fp8 mma list");
  if (!f.supports(DType::F16)) bad("every supported GPU has an fp16 tensor-core path");
  bool any_wgmma = false;
  for (const auto& [t, v] : f.mma)
    for (const auto& m : v) any_wgmma |= m.kind == "wgmma";
  if (any_wgmma != f.features.wgmma) bad("feature wgmma disagrees with the mma lists");
  if (f.features.wgmma && f.nvcc_gencode.find("sm_90a") == std::string::npos)
    bad("wgmma needs an sm_90a gencode (plain sm_90 drops wgmma)");
  std::string code = "sm_" + std::to_string(f.sm);
  if (f.nvcc_gencode.find("code=" + code) == std::string::npos) bad("nvcc_gencode does not target " + code);
  if (f.features.cp_async != (f.sm >= 80)) bad("cp_async is an sm80+ feature");
  if (f.features.tma != (f.sm >= 90)) bad("tma is an sm90 feature");
}

std::string gpu_key(std::string_view s) {
  std::string k = spec::name_key(s);
  for (const char* prefix : {"nvidia", "geforce", "tesla", "quadro"})
    if (k.rfind(prefix, 0) == 0) k = k.substr(std::string_view(prefix).size());
  return k;
}

struct Table {
  std::vector<GpuFacts> gpus;
  DiagSink diags{"data/gpus.json (embedded)"};
};

const Table& table() {
  static const Table t = [] {
    Table t;
    parse_gpus(gpus_json(), t.gpus, t.diags);
    return t;
  }();
  return t;
}

}  // namespace

bool parse_gpus(std::string_view text, std::vector<GpuFacts>& out, DiagSink& diags) {
  TableReader r{diags};
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    r.error("HW0101", "", std::string("malformed JSON: ") + e.what());
    return false;
  }
  if (!doc.is_object() || !doc.contains("gpus") || !doc.at("gpus").is_array()) {
    r.error("HW0101", "", "expected {\"schema_version\": 1, \"gpus\": [...]}");
    return false;
  }
  r.keys(doc, "", {"schema_version", "about", "gpus"}, false);
  if (r.integer(doc, "schema_version", "", 1, 1) != 1) return false;
  std::vector<GpuFacts> gs;
  std::set<std::string> seen;
  for (size_t i = 0; i < doc.at("gpus").size(); ++i) {
    std::string p = "/gpus/" + std::to_string(i);
    GpuFacts f;
    TableReader one{diags};
    read_gpu(one, doc.at("gpus")[i], p, f);
    if (one.ok) check_gpu(one, f, p);
    r.ok &= one.ok;
    // Names and aliases must resolve to exactly one GPU.
    std::vector<std::string> keys{gpu_key(f.name)};
    for (const auto& a : f.aliases)
      if (gpu_key(a) != keys.front()) keys.push_back(gpu_key(a));
    for (const auto& k : keys)
      if (!seen.insert(k).second) r.error("HW0106", p, f.name + ": name or alias \"" + k + "\" is used twice");
    gs.push_back(std::move(f));
  }
  if (gs.empty()) r.error("HW0101", "/gpus", "no GPUs");
  if (r.ok) out = std::move(gs);
  return r.ok;
}

std::string_view gpus_json() { return embedded::kGpusJson; }

const std::vector<GpuFacts>& gpus() { return table().gpus; }

std::vector<std::string> gpu_names() {
  std::vector<std::string> v;
  for (const auto& g : gpus()) v.push_back(g.name);
  return v;
}

const GpuFacts* find_gpu(std::string_view name) {
  std::string key = gpu_key(name);
  if (key.empty()) return nullptr;
  for (const auto& g : gpus()) {
    if (gpu_key(g.name) == key) return &g;
    for (const auto& a : g.aliases)
      if (gpu_key(a) == key) return &g;
  }
  return nullptr;
}

const GpuFacts* find_gpu(std::string_view name, DiagSink& diags) {
  if (const GpuFacts* g = find_gpu(name)) return g;
  if (gpus().empty()) {
    for (const auto& d : table().diags.all()) diags.add(d);
    diags.error("HW0101", support::SrcLoc{}, "the embedded GPU table failed to load",
                "this is a build bug: run gpu_test");
    return nullptr;
  }
  std::vector<std::string> names = gpu_names();
  std::vector<std::string> all = names;
  for (const auto& g : gpus()) all.insert(all.end(), g.aliases.begin(), g.aliases.end());
  std::string near = spec::closest_name(name, all);
  if (const GpuFacts* g = near.empty() ? nullptr : find_gpu(near)) near = g->name;
  diags.error("HW0201", support::SrcLoc{}, "unknown GPU \"" + std::string(name) + "\"",
              (near.empty() ? std::string() : "did you mean \"" + near + "\"? ") + "known GPUs: " +
                  spec::join(names) + " (also by arch: sm75, sm80, sm86, sm89, sm90; `qattn gpus`)");
  return nullptr;
}

const GpuFacts* match_gpu(std::string_view driver_name, int cc_major, int cc_minor, int sm_count,
                          std::string* how) {
  if (const GpuFacts* g = find_gpu(driver_name)) {
    if (g->cc_major == cc_major && g->cc_minor == cc_minor) {
      if (how) *how = "name";
      return g;
    }
  }
  const GpuFacts* best = nullptr;
  for (const auto& g : gpus())
    if (g.cc_major == cc_major && g.cc_minor == cc_minor &&
        (!best || std::abs(g.sm_count - sm_count) < std::abs(best->sm_count - sm_count)))
      best = &g;
  if (how)
    *how = best ? "compute capability " + std::to_string(cc_major) + "." + std::to_string(cc_minor) +
                      " (\"" + std::string(driver_name) + "\" is not in the table; nearest: " + best->name + ")"
                : std::string();
  return best;
}

}  // namespace qattn::hw
