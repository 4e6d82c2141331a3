// The OpenAI-compatible chat-completions client (libcurl): one POST of {model, messages,
// temperature, max_tokens} to <base URL>/chat/completions, the reply's first choice back.
//
// Endpoint: base URL, model and the NAME of the environment variable holding the API key
// (default QATTN_LLM_API_KEY). The key is read when a request is made and sent only in the
// Authorization header: it is never logged, never part of a diagnostic, never in the request body
// or a transcript (Client::redact scrubs it from any text that is about to be written, as a
// second line of defence). A variable that is unset means no Authorization header (local servers).
//
// Retries: 429, 5xx, timeouts and dropped connections are retried `retries` times with
// exponential backoff (backoff_s, doubled each time; a Retry-After header is honoured up to 60 s).
// Other 4xx statuses, refused connections and DNS failures stop at once.
//
// Diagnostics (never throws; any reply bytes give a diagnostic, not a crash):
//   LLM0101 no endpoint configured       LLM0102 no model named        LLM0103 key variable unset
//   LLM0104 malformed URL                LLM0105 bad timeout / retry option values
//   LLM0111 cannot connect (refused, DNS) LLM0112 timed out (after the retries)
//   LLM0113 HTTP error that is not retried (400, 401, 403, 404, ...)
//   LLM0114 retries exhausted on 429 / 5xx   LLM0115 other transport error (TLS, ...)
//   LLM0121 reply is not JSON (or not UTF-8)  LLM0122 reply JSON without choices[0].message.content
//   LLM0123 reply larger than max_reply_bytes LLM0124 warning: the reply was cut at max_tokens
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/diag.h"

namespace qattn::llm {

struct Endpoint {
  std::string url;    // base URL ("https://api.deepseek.com/v1") or the full ".../chat/completions"
  std::string model;  // "deepseek-chat"
  std::string key_env = "QATTN_LLM_API_KEY";  // NAME of the variable that holds the key
  double timeout_s = 300;          // one attempt, whole request
  double connect_timeout_s = 10;
  int retries = 4;                 // extra attempts after 429 / 5xx / timeout / dropped connection
  double backoff_s = 2;            // wait before the first retry; doubles each time
  int max_tokens = 8192;
  double temperature = 0;
  size_t max_reply_bytes = 8u << 20;
  std::string completions_url() const;
};

// What the command line gave (empty, NaN, kNotGiven: not given). resolve_endpoint fills the rest from
// QATTN_LLM_URL and QATTN_LLM_MODEL and reports LLM0101..LLM0105.
struct EndpointFlags {
  static constexpr int kNotGiven = -2147483647;
  std::string url, model, key_env;
  double timeout_s = std::numeric_limits<double>::quiet_NaN(), backoff_s = std::numeric_limits<double>::quiet_NaN();
  int retries = kNotGiven, max_tokens = kNotGiven;
};
std::optional<Endpoint> resolve_endpoint(const EndpointFlags& flags, support::DiagSink& diags);

// How to configure an endpoint (the hint of LLM0101; also in README and docs/llm.md).
std::string configure_hint();

struct Message {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

struct Reply {
  std::string content;
  std::string finish_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int attempts = 0;    // HTTP requests made for this reply (1 + retries used)
  double seconds = 0;  // wall time, retries and backoff included
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int requests = 0, retries = 0;
  double seconds = 0;
};

class Client {
 public:
  explicit Client(Endpoint ep);
  // Sends the conversation; nullopt with a diagnostic when no usable reply came back.
  std::optional<Reply> chat(const std::vector<Message>& messages, support::DiagSink& diags);
  const Usage& usage() const { return usage_; }
  const Endpoint& endpoint() const { return ep_; }
  // `text` with every occurrence of the API key replaced by "[redacted]".
  std::string redact(std::string text) const;

 private:
  Endpoint ep_;
  Usage usage_;
};

// The request body (exposed for tests): never contains the key.
std::string request_body(const Endpoint& ep, const std::vector<Message>& messages);

// Parses a chat-completions reply body; LLM0121 / LLM0122 / LLM0124.
std::optional<Reply> parse_reply(std::string_view body, support::DiagSink& diags);

}  // namespace qattn::llm
