// A loopback OpenAI-compatible endpoint for the LLM tests: serves recorded exchanges from a
// scenario file under tests/llm/ (cpp-httplib, 127.0.0.1, an ephemeral port, inside the test
// process). No LLM endpoint is reachable from our machines or CI, so the LLM path is tested
// against these replays. The replies were written by hand in the shape of real chat-completions
// answers (a model reasoning in prose, then a fenced ```tl / ```cuda block).
//
// Scenario (JSON): {"about": "...", "exchanges": [EXCHANGE, ...]}, served in order, where
//   EXCHANGE = {"expect": ["substring of the request body", ...],   // checked, failures recorded
//               "status": 200, "delay_ms": 0, "repeat": 1, "headers": {"Retry-After": "0"},
//               "reply": "file.md"        // the assistant's content, wrapped in a completion body
//               | "body": "raw text"      // the HTTP body as is (bad JSON, error objects)
//               | "body_hex": "c3 28"     // raw bytes (non-UTF-8)
//               | "body_repeat": ["x", N] // a huge body: "x" repeated N times
//               "usage": [prompt_tokens, completion_tokens]}
// A request after the last exchange gets HTTP 500 and is recorded as a failure.
#pragma once
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace qattn::testing {

// The source tree: $QATTN_HOME when set (a test binary carried to another machine), else the build's.
inline std::filesystem::path llm_test_dir() {
  const char* home = std::getenv("QATTN_HOME");
  return std::filesystem::path(home && *home ? home : QATTN_SOURCE_DIR) / "tests" / "llm";
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RecordedRequest {
  std::string body;
  std::string authorization;  // the Authorization header as received ("" when none)
};

class ReplayServer {
 public:
  // `scenario`: a file name under tests/llm/ ("clean_run.json"), or inline JSON text starting with '{'.
  explicit ReplayServer(const std::string& scenario) {
    using json = nlohmann::json;
    json j = json::parse(scenario.size() && scenario[0] == '{' ? scenario : slurp(llm_test_dir() / scenario));
    for (const auto& e : j.at("exchanges")) {
      int repeat = e.value("repeat", 1);
      for (int i = 0; i < repeat; ++i) exchanges_.push_back(e);
    }
    svr_.Post(R"(/v1/chat/completions)", [this](const httplib::Request& req, httplib::Response& res) { serve(req, res); });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("replay server: cannot bind 127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ReplayServer() {
    svr_.stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  int port() const { return port_; }
  std::vector<RecordedRequest> requests() const {
    std::lock_guard<std::mutex> g(mu_);
    return requests_;
  }
  std::vector<std::string> failures() const {
    std::lock_guard<std::mutex> g(mu_);
    return failures_;
  }
  size_t served() const {
    std::lock_guard<std::mutex> g(mu_);
    return next_;
  }
  size_t total() const { return exchanges_.size(); }

 private:
  void serve(const httplib::Request& req, httplib::Response& res) {
    using json = nlohmann::json;
    json e;
    size_t index = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      requests_.push_back({req.body, req.has_header("Authorization") ? req.get_header_value("Authorization") : ""});
      index = next_;
      if (next_ >= exchanges_.size()) {
        failures_.push_back("request " + std::to_string(index + 1) + " after the last recorded exchange");
        res.status = 500;
        res.set_content("{\"error\": {\"message\": \"replay: no more exchanges\"}}", "application/json");
        return;
      }
      e = exchanges_[next_++];
      const json expect = e.value("expect", json::array());
      for (const auto& want : expect)
        if (req.body.find(want.get<std::string>()) == std::string::npos)
          failures_.push_back("request " + std::to_string(index + 1) + " lacks \"" + want.get<std::string>() + "\"");
    }
    if (int ms = e.value("delay_ms", 0); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    res.status = e.value("status", 200);
    const json headers = e.value("headers", json::object());
    for (const auto& [k, v] : headers.items()) res.set_header(k, v.get<std::string>());
    std::string body;
    if (e.contains("reply")) {
      auto usage = e.value("usage", json::array({1000, 200}));
      json b{{"id", "chatcmpl-replay-" + std::to_string(index + 1)},
             {"object", "chat.completion"},
             {"created", 1764000000},
             {"model", "replay-model"},
             {"choices", json::array({{{"index", 0},
                                       {"message", {{"role", "assistant"}, {"content", slurp(llm_test_dir() / e["reply"].get<std::string>())}}},
                                       {"finish_reason", e.value("finish_reason", "stop")}}})},
             {"usage", {{"prompt_tokens", usage[0]}, {"completion_tokens", usage[1]}, {"total_tokens", usage[0].get<int>() + usage[1].get<int>()}}}};
      body = b.dump();
    } else if (e.contains("body_hex")) {
      std::istringstream hex(e["body_hex"].get<std::string>());
      unsigned v;
      while (hex >> std::hex >> v) body.push_back(static_cast<char>(v));
    } else if (e.contains("body_repeat")) {
      body.reserve(e["body_repeat"][1].get<size_t>());
      for (size_t i = 0; i < e["body_repeat"][1].get<size_t>(); ++i) body += e["body_repeat"][0].get<std::string>();
    } else {
      body = e.value("body", "");
    }
    res.set_content(body, "application/json");
  }

  httplib::Server svr_;
  std::thread thread_;
  int port_ = 0;
  std::vector<nlohmann::json> exchanges_;
  mutable std::mutex mu_;
  size_t next_ = 0;
  std::vector<RecordedRequest> requests_;
  std::vector<std::string> failures_;
};

}  // namespace qattn::testing
