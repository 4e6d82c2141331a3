#include "llm/transcript.h"
#include "llm/text.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace qattn::llm {
namespace {

using json = nlohmann::json;
using text::dump;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

Transcript::Transcript() : redact_([](std::string s) { return s; }), t0_(std::chrono::steady_clock::now()) {}

double Transcript::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void Transcript::emit(const std::string& line) { lines_ += redact_(line) + "\n"; }

void Transcript::request(const std::string& stage, int turn, const std::vector<Message>& sent, size_t new_from) {
  json j{{"event", "request"}, {"stage", stage}, {"turn", turn}, {"t", elapsed()}, {"messages_total", sent.size()}};
  j["messages"] = json::array();  // only the messages this request adds to the conversation
  for (size_t i = new_from; i < sent.size(); ++i) j["messages"].push_back({{"role", sent[i].role}, {"content", sent[i].content}});
  emit(dump(j));
}

void Transcript::reply(const std::string& stage, int turn, const Reply& r) {
  json j{{"event", "reply"},
         {"stage", stage},
         {"turn", turn},
         {"t", elapsed()},
         {"seconds", r.seconds},
         {"attempts", r.attempts},
         {"finish_reason", r.finish_reason},
         {"prompt_tokens", r.prompt_tokens},
         {"completion_tokens", r.completion_tokens},
         {"content", r.content}};
  emit(dump(j));
  auto& s = this->stage(stage, "");
  s.turns++;
  s.prompt_tokens += r.prompt_tokens;
  s.completion_tokens += r.completion_tokens;
}

void Transcript::verdict(const std::string& stage, int turn, bool ok, const std::string& diagnostics) {
  emit(dump(json{{"event", "verify"}, {"stage", stage}, {"turn", turn}, {"t", elapsed()}, {"ok", ok}, {"diagnostics", diagnostics}}));
}

void Transcript::failure(const std::string& stage, int turn, const std::string& diagnostics) {
  emit(dump(json{{"event", "error"}, {"stage", stage}, {"turn", turn}, {"t", elapsed()}, {"diagnostics", diagnostics}}));
}

void Transcript::note(const std::string& stage, const std::string& text) {
  emit(dump(json{{"event", "note"}, {"stage", stage}, {"t", elapsed()}, {"text", text}}));
}

StageRecord& Transcript::stage(const std::string& name, const std::string& engine) {
  for (auto& s : stages_)
    if (s.stage == name) {
      if (!engine.empty()) s.engine = engine;
      return s;
    }
  stages_.push_back(StageRecord{});
  stages_.back().stage = name;
  stages_.back().engine = engine;
  return stages_.back();
}

std::string Transcript::summary_json(const Endpoint& ep, const Usage& usage, bool ok, bool unverified) const {
  json j{{"ok", ok},
         {"verdict", !ok ? "FAILED" : unverified ? "compiled but unverified" : "succeeded"},
         {"endpoint", {{"url", ep.url}, {"model", ep.model}, {"key_env", ep.key_env}}},
         {"seconds", elapsed()},
         {"requests", usage.requests},
         {"retries", usage.retries},
         {"prompt_tokens", usage.prompt_tokens},
         {"completion_tokens", usage.completion_tokens}};
  j["stages"] = json::array();
  for (const auto& s : stages_)
    j["stages"].push_back({{"stage", s.stage},
                           {"engine", s.engine},
                           {"used", s.used},
                           {"ok", s.ok},
                           {"turns", s.turns},
                           {"repairs", s.repairs},
                           {"seconds", s.seconds},
                           {"prompt_tokens", s.prompt_tokens},
                           {"completion_tokens", s.completion_tokens},
                           {"note", s.note}});
  return redact_(dump(j, 2) + "\n");
}

std::string Transcript::summary_md(const Endpoint& ep, const Usage& usage, bool ok, bool unverified) const {
  std::ostringstream os;
  os << "# LLM run: " << (!ok ? "FAILED" : unverified ? "compiled but unverified" : "succeeded") << "\n\n";
  if (ok && unverified)
    os << "The LLM's CUDA compiled; no GPU numerics check ran on it (no GPU of the target here, or --no-verify), "
          "so it is not verified.\n\n";
  os << "Endpoint " << ep.url << ", model " << ep.model << "; " << usage.requests << " requests (" << usage.retries
     << " retried), " << usage.prompt_tokens << " prompt + " << usage.completion_tokens << " completion tokens, "
     << fixed(elapsed(), 1) << " s.\n\n";
  os << "| stage | engine | used | ok | LLM turns | repairs | seconds | tokens in/out | note |\n";
  os << "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& s : stages_) {
    os << "| " << s.stage << " | " << s.engine << " | " << (s.used.empty() ? "-" : s.used) << " | "
       << (s.ok ? "yes" : "no") << " | " << s.turns << " | " << s.repairs << " | " << fixed(s.seconds, 2) << " | "
       << s.prompt_tokens << "/" << s.completion_tokens << " | " << s.note << " |\n";
  }
  return redact_(os.str());
}

}  // namespace qattn::llm
