#include "llm/repair.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "llm/extract.h"
#include "llm/prompt.h"

namespace qattn::llm {

namespace {

// The files of the build itself: the kernel's source and the build's own outputs.
bool own_file(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return base == "kernel.cu" || base == "build.log" || base == "libqattn_kernel.so";
}

// A line that names a file other than the kernel's own (an absolute path outside the build, or
// "In file included from"): nvcc and the host compiler quote that file's text in it and after it.
bool quotes_other_file(const std::string& line) {
  if (line.find("included from") != std::string::npos) return true;
  for (size_t p = line.find('/'); p != std::string::npos; p = line.find('/', p + 1)) {
    if (p > 0 && !(line[p - 1] == ' ' || line[p - 1] == '\t' || line[p - 1] == '"' || line[p - 1] == '\'' ||
                   line[p - 1] == '(' || line[p - 1] == '<' || line[p - 1] == '='))
      continue;  // not the start of an absolute path
    size_t e = p;
    while (e < line.size() && !std::isspace(static_cast<unsigned char>(line[e])) && line[e] != ':' && line[e] != '(' &&
           line[e] != ')' && line[e] != '"' && line[e] != '\'' && line[e] != '>' && line[e] != ',')
      ++e;
    const std::string path = line.substr(p, e - p);
    if (path.size() > 1 && !own_file(path)) return true;
    p = e == p ? p : e - 1;
  }
  return false;
}

}  // namespace

std::string without_outside_files(const std::string& text) {
  std::istringstream in(text);
  std::string out, line;
  bool skipping = false;
  int dropped = 0;
  while (std::getline(in, line)) {
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    const bool hint = line.rfind("  hint:", 0) == 0;
    // quoted tool output (nvcc's log) is indented inside our diagnostics
    if (indented && !hint && quotes_other_file(line)) {
      skipping = true;
      ++dropped;
      continue;
    }
    // what follows such a line (code excerpts, carets, notes) until the next line about kernel.cu,
    // the next diagnostic or its hint
    if (skipping && indented && !hint && line.find("kernel.cu") == std::string::npos) {
      ++dropped;
      continue;
    }
    if (skipping && dropped > 0) out += "    (" + std::to_string(dropped) + " line(s) about files outside the build left out)\n";
    skipping = false;
    dropped = 0;
    out += line + "\n";
  }
  if (dropped > 0) out += "    (" + std::to_string(dropped) + " line(s) about files outside the build left out)\n";
  return out;
}

std::string diagnostics_for_llm(const support::DiagSink& d, size_t limit) {
  std::string text = without_outside_files(d.render());
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
