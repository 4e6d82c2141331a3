// resolve_endpoint: command-line flags + environment -> Endpoint (LLM0101..LLM0105).
// Flags win over QATTN_LLM_URL / QATTN_LLM_MODEL; the key itself is never read here.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "llm/client.h"
#include "llm/text.h"

namespace qattn::llm {
namespace {

using text::env;

bool valid_env_name(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || c == '_')) return false;
  return true;
}

}  // namespace

std::string configure_hint() {
  return "rules is the default mode (no endpoint needed: drop --mode or pass --mode rules); for the LLM modes set "
         "QATTN_LLM_URL (e.g. https://api.deepseek.com/v1) and QATTN_LLM_MODEL (e.g. deepseek-chat), or pass "
         "--llm-url and --llm-model, and put the API key in $QATTN_LLM_API_KEY (or name another variable with "
         "--llm-key-env); docs/llm.md";
}

std::optional<Endpoint> resolve_endpoint(const EndpointFlags& f, support::DiagSink& diags) {
  Endpoint ep;
  ep.url = !f.url.empty() ? f.url : env("QATTN_LLM_URL");
  ep.model = !f.model.empty() ? f.model : env("QATTN_LLM_MODEL");
  if (!f.key_env.empty()) ep.key_env = f.key_env;
  bool ok = true;
  if (ep.url.empty()) {
    diags.error("LLM0101", {}, "no LLM endpoint is configured", configure_hint());
    return std::nullopt;
  }
  if (ep.url.rfind("http://", 0) != 0 && ep.url.rfind("https://", 0) != 0) {
    diags.error("LLM0104", {}, "malformed endpoint URL '" + ep.url + "': it must start with http:// or https://",
                "e.g. --llm-url https://api.deepseek.com/v1 or http://127.0.0.1:8000/v1");
    ok = false;
  }
  if (ep.model.empty()) {
    diags.error("LLM0102", {}, "no model is named for the endpoint " + ep.url,
                "set QATTN_LLM_MODEL or pass --llm-model (e.g. deepseek-chat, gpt-4o, Qwen/Qwen2.5-Coder-32B-Instruct)");
    ok = false;
  }
  if (!valid_env_name(ep.key_env)) {
    // The value is not echoed: it may be the key itself, passed by mistake.
    diags.error("LLM0103", {}, "--llm-key-env takes the NAME of an environment variable (letters, digits, _)",
                "e.g. --llm-key-env DEEPSEEK_API_KEY; never pass the key itself on the command line");
    ok = false;
  } else if (!f.key_env.empty() && env(ep.key_env.c_str()).empty()) {
    diags.error("LLM0103", {}, "the key variable $" + ep.key_env + " named by --llm-key-env is not set",
                "export " + ep.key_env + "=... (the key is sent only in the Authorization header)");
    ok = false;
  }
  if (!std::isnan(f.timeout_s)) {
    if (!(f.timeout_s > 0) || !std::isfinite(f.timeout_s)) {
      diags.error("LLM0105", {}, "--llm-timeout must be a positive number of seconds", "e.g. --llm-timeout 300");
      ok = false;
    } else {
      ep.timeout_s = f.timeout_s;
      ep.connect_timeout_s = std::min(ep.connect_timeout_s, f.timeout_s);
    }
  }
  if (f.retries != EndpointFlags::kNotGiven) {
    if (f.retries < 0 || f.retries > 20) {
      diags.error("LLM0105", {}, "--llm-retries must be between 0 and 20", "e.g. --llm-retries 4");
      ok = false;
    } else {
      ep.retries = f.retries;
    }
  }
  if (!std::isnan(f.backoff_s)) {
    if (!std::isfinite(f.backoff_s) || f.backoff_s < 0 || f.backoff_s > 600) {
      diags.error("LLM0105", {}, "--llm-backoff must be between 0 and 600 seconds", "e.g. --llm-backoff 2");
      ok = false;
    } else {
      ep.backoff_s = f.backoff_s;
    }
  }
  if (f.max_tokens != EndpointFlags::kNotGiven) {
    if (f.max_tokens < 256) {
      diags.error("LLM0105", {}, "--llm-max-tokens must be at least 256", "e.g. --llm-max-tokens 8192");
      ok = false;
    } else {
      ep.max_tokens = f.max_tokens;
    }
  }
  if (!ok) return std::nullopt;
  return ep;
}

}  // namespace qattn::llm
