#include "llm/client.h"
#include "llm/text.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

namespace qattn::llm {
namespace {

using json = nlohmann::json;

using text::dump;

using text::env;

// One HTTP exchange: what came back, or how it failed.
struct Exchange {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  bool too_large = false;
  double retry_after_s = -1;
  std::string error;  // curl's error text (never holds the key: the key is only in a header)
};

struct Sink {
  std::string* body;
  size_t limit;
  bool* too_large;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t bytes = size * n;
  if (s->body->size() + bytes > s->limit) {
    *s->too_large = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  s->body->append(data, bytes);
  return bytes;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  const size_t bytes = size * n;
  std::string line(data, bytes);
  std::string lower = line;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.rfind("retry-after:", 0) == 0) {
    char* end = nullptr;
    double v = std::strtod(line.c_str() + 12, &end);
    if (end != line.c_str() + 12 && std::isfinite(v) && v >= 0) *static_cast<double*>(user) = v;
  }
  return bytes;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

Exchange post(const Endpoint& ep, const std::string& url, const std::string& body, const std::string& key) {
  Exchange x;
  global_init();
  CURL* h = curl_easy_init();
  if (!h) {
    x.code = CURLE_FAILED_INIT;
    x.error = "curl_easy_init failed";
    return x;
  }
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Accept: application/json");
  if (!key.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + key).c_str());
  Sink sink{&x.body, ep.max_reply_bytes, &x.too_large};
  // Loopback never goes through a proxy (the replay tests), whatever http_proxy says.
  std::string no_proxy = "localhost,127.0.0.1,::1";
  for (const char* n : {"no_proxy", "NO_PROXY"})
    if (std::string v = env(n); !v.empty()) no_proxy += "," + v;
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &x.retry_after_s);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max(1.0, ep.timeout_s * 1000)));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::max(1.0, ep.connect_timeout_s * 1000)));
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_NOPROXY, no_proxy.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");  // whatever curl can decode
  curl_easy_setopt(h, CURLOPT_USERAGENT, "qattn/0.1");
  x.code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x.status);
  x.error = errbuf[0] ? errbuf : curl_easy_strerror(x.code);
  curl_slist_free_all(headers);
  curl_easy_cleanup(h);
  return x;
}

bool retryable_transport(CURLcode c) {
  return c == CURLE_OPERATION_TIMEDOUT || c == CURLE_RECV_ERROR || c == CURLE_SEND_ERROR || c == CURLE_GOT_NOTHING ||
         c == CURLE_PARTIAL_FILE;
}

std::string status_hint(long status, const Endpoint& ep) {
  if (status == 401 || status == 403)
    return "the endpoint rejected the key: put a valid key in $" + ep.key_env + " (or name another variable with --llm-key-env)";
  if (status == 404)
    return "check the base URL (it should end in /v1 for most servers) and the model name '" + ep.model + "'";
  if (status == 400 || status == 413 || status == 422)
    return "the endpoint refused the request; try a smaller prompt (--llm-max-tokens) or another model";
  return "see the endpoint's documentation for this status";
}

// A short, printable excerpt of an error body (JSON error message when there is one).
std::string excerpt(const std::string& body) {
  std::string msg;
  try {
    auto j = json::parse(body);
    if (j.is_object() && j.contains("error")) {
      const auto& e = j["error"];
      msg = e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : dump(e);
    }
  } catch (const std::exception&) {
  }
  if (msg.empty()) msg = body;
  std::string out;
  for (unsigned char c : msg) {
    if (out.size() >= 200) {
      out += "...";
      break;
    }
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : ' ';
  }
  return out;
}

}  // namespace

std::string Endpoint::completions_url() const {
  std::string u = url;
  while (!u.empty() && u.back() == '/') u.pop_back();
  const std::string tail = "/chat/completions";
  if (u.size() >= tail.size() && u.compare(u.size() - tail.size(), tail.size(), tail) == 0) return u;
  return u + tail;
}

std::string request_body(const Endpoint& ep, const std::vector<Message>& messages) {
  json j;
  j["model"] = ep.model;
  j["messages"] = json::array();
  for (const auto& m : messages) j["messages"].push_back({{"role", m.role}, {"content", m.content}});
  j["temperature"] = ep.temperature;
  j["max_tokens"] = ep.max_tokens;
  j["stream"] = false;
  return dump(j);
}

std::optional<Reply> parse_reply(std::string_view body, support::DiagSink& diags) {
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const std::exception& e) {
    diags.error("LLM0121", {}, "the endpoint's reply is not JSON (" + std::to_string(body.size()) + " bytes): " +
                                   excerpt(std::string(e.what())),
                "is the URL an OpenAI-compatible chat-completions endpoint? Replies must be UTF-8 JSON");
    return std::nullopt;
  }
  const char* missing = nullptr;
  const json* content = nullptr;
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    missing = "choices[0]";
  else if (!j["choices"][0].is_object() || !j["choices"][0].contains("message") || !j["choices"][0]["message"].is_object())
    missing = "choices[0].message";
  else if (!j["choices"][0]["message"].contains("content") || !j["choices"][0]["message"]["content"].is_string())
    missing = "choices[0].message.content (a string)";
  else
    content = &j["choices"][0]["message"]["content"];
  if (missing) {
    std::string why = j.is_object() && j.contains("error") ? ": error " + excerpt(dump(j)) : "";
    diags.error("LLM0122", {}, std::string("the endpoint's reply has no ") + missing + why,
                "the endpoint must answer in the OpenAI chat-completions format (non-streaming)");
    return std::nullopt;
  }
  Reply r;
  r.content = content->get<std::string>();
  const auto& c0 = j["choices"][0];
  if (c0.contains("finish_reason") && c0["finish_reason"].is_string()) r.finish_reason = c0["finish_reason"].get<std::string>();
  if (j.contains("usage") && j["usage"].is_object()) {
    const auto& u = j["usage"];
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) r.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
      r.completion_tokens = u["completion_tokens"].get<int64_t>();
  }
  if (r.finish_reason == "length")
    diags.warning("LLM0124", {}, "the reply was cut at max_tokens", "raise --llm-max-tokens");
  return r;
}

Client::Client(Endpoint ep) : ep_(std::move(ep)) {}

std::string Client::redact(std::string text) const {
  const std::string key = env(ep_.key_env.c_str());
  if (key.size() < 4) return text;  // too short to be a key; replacing it would mangle text
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 10))
    text.replace(at, key.size(), "[redacted]");
  return text;
}

std::optional<Reply> Client::chat(const std::vector<Message>& messages, support::DiagSink& diags) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string body = request_body(ep_, messages);
  const std::string url = ep_.completions_url();
  const std::string key = env(ep_.key_env.c_str());
  double wait = ep_.backoff_s;
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (int attempt = 1;; ++attempt) {
    Exchange x = post(ep_, url, body, key);
    ++usage_.requests;
    const bool last = attempt > ep_.retries;
    const bool http_retry = x.code == CURLE_OK && (x.status == 429 || (x.status >= 500 && x.status <= 599));
    const bool net_retry = x.code != CURLE_OK && !x.too_large && retryable_transport(x.code);
    if ((http_retry || net_retry) && !last) {
      double w = x.retry_after_s >= 0 ? std::min(60.0, x.retry_after_s) : wait;
      w = std::max(w, wait);
      wait *= 2;
      ++usage_.retries;
      std::this_thread::sleep_for(std::chrono::duration<double>(w));
      continue;
    }
    usage_.seconds += seconds();
    const std::string tries = std::to_string(attempt) + (attempt == 1 ? " attempt" : " attempts");
    if (x.too_large) {
      diags.error("LLM0123", {}, "the reply is larger than " + std::to_string(ep_.max_reply_bytes) + " bytes",
                  "lower --llm-max-tokens, or check that the URL is a chat-completions endpoint");
      return std::nullopt;
    }
    if (x.code == CURLE_OPERATION_TIMEDOUT) {
      diags.error("LLM0112", {}, "the request to " + url + " timed out after " + tries + " (" + redact(x.error) + ")",
                  "raise --llm-timeout (now " + std::to_string(ep_.timeout_s) + " s) or --llm-retries");
      return std::nullopt;
    }
    if (x.code == CURLE_COULDNT_CONNECT || x.code == CURLE_COULDNT_RESOLVE_HOST || x.code == CURLE_COULDNT_RESOLVE_PROXY) {
      diags.error("LLM0111", {}, "cannot connect to " + url + ": " + redact(x.error),
                  "check --llm-url / $QATTN_LLM_URL and that the server is running (docs/llm.md)");
      return std::nullopt;
    }
    if (x.code == CURLE_URL_MALFORMAT || x.code == CURLE_UNSUPPORTED_PROTOCOL) {
      diags.error("LLM0104", {}, "malformed endpoint URL '" + url + "': " + redact(x.error),
                  "write it as http(s)://HOST[:PORT]/v1");
      return std::nullopt;
    }
    if (x.code != CURLE_OK) {
      diags.error("LLM0115", {}, "the request to " + url + " failed after " + tries + ": " + redact(x.error),
                  "check the URL, the network and the endpoint's TLS certificate");
      return std::nullopt;
    }
    if (http_retry) {
      diags.error("LLM0114", {}, "the endpoint answered HTTP " + std::to_string(x.status) + " on " + tries +
                                     " in a row (" + std::to_string(ep_.retries) + " retries): " + redact(excerpt(x.body)),
                  x.status == 429 ? "the endpoint is rate limiting: wait, or raise --llm-retries"
                                  : "the endpoint is failing: try again later, or raise --llm-retries");
      return std::nullopt;
    }
    if (x.status < 200 || x.status > 299) {
      diags.error("LLM0113", {}, "the endpoint answered HTTP " + std::to_string(x.status) + ": " + redact(excerpt(x.body)),
                  status_hint(x.status, ep_));
      return std::nullopt;
    }
    // The reply enters the program here, redacted: an endpoint that echoes the API key cannot
    // get it into a diagnostic, the TL, the CUDA, an artifact or a cache entry (the body before
    // parsing, for the diagnostics; the content after, for a key spelt with JSON escapes).
    auto r = parse_reply(redact(x.body), diags);
    if (!r) return std::nullopt;
    r->content = redact(std::move(r->content));
    r->attempts = attempt;
    r->seconds = seconds();
    usage_.prompt_tokens += r->prompt_tokens;
    usage_.completion_tokens += r->completion_tokens;
    return r;
  }
}

}  // namespace qattn::llm
