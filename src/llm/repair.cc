#include "llm/repair.h"

#include <algorithm>

#include "llm/extract.h"
#include "llm/prompt.h"

namespace qattn::llm {

std::string diagnostics_for_llm(const support::DiagSink& d, size_t limit) {
  std::string text = d.render();
  if (text.size() > limit) text = text.substr(0, limit) + "\n... (more diagnostics cut)\n";
  return text;
}

StageResult run_stage(Client& client, Transcript& transcript, StageRequest req, const Verifier& verify,
                      support::DiagSink& diags) {
  StageResult out;
  auto& rec = transcript.stage(req.stage, "");
  const double t0 = transcript.elapsed();
  auto& msgs = req.messages;
  size_t new_from = 0;
  std::string last;
  support::DiagSink last_diags;
  for (int turn = 1; turn <= std::max(1, req.max_turns); ++turn) {
    transcript.request(req.stage, turn, msgs, new_from);
    support::DiagSink net;
    auto reply = client.chat(msgs, net);
    if (!reply) {
      transcript.failure(req.stage, turn, net.render());
      for (const auto& d : net.all()) diags.add(d);
      rec.note = "endpoint failed: " + (net.all().empty() ? std::string("?") : net.all().front().code);
      rec.seconds = transcript.elapsed() - t0;
      out.transport_failed = true;
      return out;
    }
    transcript.reply(req.stage, turn, *reply);
    msgs.push_back({"assistant", reply->content});
    support::DiagSink v;
    for (const auto& d : net.all()) v.add(d);  // LLM0124 (cut at max_tokens) helps the repair
    auto block = extract_block(reply->content, req.langs, v);
    bool ok = block && verify(*block, v) && !v.has_errors();
    const std::string rendered = diagnostics_for_llm(v);
    transcript.verdict(req.stage, turn, ok, rendered);
    if (ok) {
      rec.seconds = transcript.elapsed() - t0;
      out.answer = std::move(*block);
      return out;
    }
    last_diags = v;
    if (turn == req.max_turns) break;
    PromptVars vars{{"what", req.what}, {"lang", req.langs.empty() ? std::string("tl") : req.langs.front()},
                    {"diagnostics", rendered}, {"turn", std::to_string(turn + 1)},
                    {"max_turns", std::to_string(req.max_turns)}};
    support::DiagSink pd;
    auto repair = render_template("repair", vars, pd);
    if (!repair) {
      for (const auto& d : pd.all()) diags.add(d);
      break;
    }
    new_from = msgs.size();  // the assistant message is already in the reply event
    msgs.push_back({"user", *repair});
    rec.repairs++;
  }
  rec.seconds = transcript.elapsed() - t0;
  for (const auto& d : last_diags.all()) diags.add(d);
  std::string codes;
  for (const auto& d : last_diags.all())
    if (d.severity == support::Severity::Error && codes.find(d.code) == std::string::npos)
      codes += (codes.empty() ? "" : ", ") + d.code;
  rec.note = "no answer passed in " + std::to_string(rec.turns) + " turns (last: " + (codes.empty() ? "?" : codes) + ")";
  diags.error("LLM0303", {}, "stage " + req.stage + ": no answer of the LLM for " + req.what + " passed verification in " +
                                 std::to_string(req.max_turns) + " turns (last diagnostics above)",
              "raise --llm-turns, try another model, or use --mode llm+rules to fall back to the rules engine");
  return out;
}

}  // namespace qattn::llm
