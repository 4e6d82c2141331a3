// The record of an LLM run: every prompt, reply, verification verdict and fallback, as JSON lines
// (llm/transcript.jsonl in the artifacts folder), and a summary per stage (llm/summary.json and
// llm/summary.md): engine, success, LLM turns and repair turns, time, tokens.
// Every string passes the redactor (Client::redact) before it is stored: no artifact can hold the
// API key even if an endpoint echoed it back. Request headers are never recorded.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "llm/client.h"

namespace qattn::llm {

struct StageRecord {
  std::string stage;   // "1a", "1b", "2", "vanilla"
  std::string engine;  // what was asked: "rules", "llm", "llm+rules"
  std::string used;    // what produced the output: "rules", "llm", or "" when the stage failed
  bool ok = false;
  int turns = 0;       // LLM answers received (1 = accepted first time)
  int repairs = 0;     // repair prompts sent (diagnostics fed back)
  double seconds = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string note;    // why it failed or fell back
};

class Transcript {
 public:
  Transcript();
  void set_redactor(std::function<std::string(std::string)> r) { redact_ = std::move(r); }

  void request(const std::string& stage, int turn, const std::vector<Message>& sent, size_t new_from);
  void reply(const std::string& stage, int turn, const Reply& r);
  void verdict(const std::string& stage, int turn, bool ok, const std::string& diagnostics);
  void failure(const std::string& stage, int turn, const std::string& diagnostics);
  void note(const std::string& stage, const std::string& text);

  StageRecord& stage(const std::string& name, const std::string& engine);  // adds or finds
  const std::vector<StageRecord>& stages() const { return stages_; }

  std::string jsonl() const { return lines_; }
  // unverified: the LLM's CUDA compiled but no numerics check ran (no GPU): the run is reported as
  // "compiled but unverified", never as succeeded
  std::string summary_json(const Endpoint& ep, const Usage& usage, bool ok, bool unverified = false) const;
  std::string summary_md(const Endpoint& ep, const Usage& usage, bool ok, bool unverified = false) const;
  double elapsed() const;

 private:
  void emit(const std::string& line);
  std::function<std::string(std::string)> redact_;
  std::chrono::steady_clock::time_point t0_;
  std::string lines_;
  std::vector<StageRecord> stages_;
};

}  // namespace qattn::llm
