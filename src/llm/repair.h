// The bounded repair loop of one LLM stage: send the prompt, extract the fenced answer, verify it;
// on failure send the diagnostics back (prompts/repair.md) and try again, at most `max_turns`
// answers in all. Transport failures (LLM01xx after the client's own retries) end the stage at
// once: they are not the model's fault and not worth a repair turn.
// Diagnostics: the last verifier diagnostics, then LLM0303 (no answer passed in max_turns).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "llm/client.h"
#include "llm/transcript.h"
#include "support/diag.h"

namespace qattn::llm {

struct StageRequest {
  std::string stage;                // "1a", "1b", "2", "vanilla"
  std::string what;                 // "the TL sketch" (for messages)
  std::vector<Message> messages;    // system + first user prompt
  std::vector<std::string> langs;   // accepted fence languages, preferred first: {"tl"}
  int max_turns = 3;
};

// Checks an extracted block; reports what is wrong into diags (returns false then).
using Verifier = std::function<bool(const std::string& block, support::DiagSink& diags)>;

struct StageResult {
  std::optional<std::string> answer;  // the verified block
  bool transport_failed = false;      // the endpoint, not the model, failed
};

StageResult run_stage(Client& client, Transcript& transcript, StageRequest req, const Verifier& verify,
                      support::DiagSink& diags);

// Diagnostics rendered for the LLM, capped at `limit` bytes, without_outside_files.
std::string diagnostics_for_llm(const support::DiagSink& d, size_t limit = 8000);

// `text` without the quoted tool output (indented lines) that names a file other than the build's
// own (kernel.cu, build.log) -- an absolute path elsewhere, "In file included from" -- nor the
// excerpt lines after it, replaced by a count: what goes back to the endpoint carries no content
// of files outside the build.
std::string without_outside_files(const std::string& text);

}  // namespace qattn::llm
