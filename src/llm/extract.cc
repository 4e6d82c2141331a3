#include "llm/extract.h"

#include <algorithm>
#include <cctype>

#include "support/bounded_io.h"

namespace qattn::llm {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// A fence line: optional blanks, then 3+ '`' or '~'. Returns the fence (char, length) and info string.
bool fence(std::string_view line, char& ch, size_t& len, std::string& info) {
  size_t i = 0;
  while (i < line.size() && i < 8 && (line[i] == ' ' || line[i] == '\t')) ++i;
  if (i >= line.size() || (line[i] != '`' && line[i] != '~')) return false;
  ch = line[i];
  size_t j = i;
  while (j < line.size() && line[j] == ch) ++j;
  len = j - i;
  if (len < 3) return false;
  info = std::string(line.substr(j));
  return true;
}

}  // namespace

std::vector<FencedBlock> fenced_blocks(std::string_view reply) {
  std::vector<FencedBlock> out;
  bool open = false;
  char ch = 0;
  size_t len = 0;
  FencedBlock cur;
  int line_no = 0;
  size_t pos = 0;
  while (pos < reply.size()) {
    size_t nl = reply.find('\n', pos);
    std::string_view line = reply.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? reply.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    char c2 = 0;
    size_t l2 = 0;
    std::string info;
    const bool is_fence = fence(line, c2, l2, info);
    if (!open) {
      if (!is_fence) continue;
      open = true;
      ch = c2;
      len = l2;
      cur = FencedBlock{};
      cur.line = line_no;
      size_t a = info.find_first_not_of(" \t");
      if (a != std::string::npos) {
        size_t b = info.find_first_of(" \t{", a);
        cur.lang = lower(info.substr(a, b == std::string::npos ? std::string::npos : b - a));
      }
      continue;
    }
    if (is_fence && c2 == ch && l2 >= len && info.find_first_not_of(" \t") == std::string::npos) {
      out.push_back(std::move(cur));
      open = false;
      continue;
    }
    cur.text.append(line);
    cur.text += '\n';
  }
  if (open) {
    cur.closed = false;
    out.push_back(std::move(cur));
  }
  return out;
}

std::optional<std::string> extract_block(std::string_view reply, const std::vector<std::string>& langs,
                                         support::DiagSink& diags) {
  if (reply.size() > support::kMaxReplyBytes) {  // checked before any copy of it is made
    diags.error("LLM0203", {}, "the reply is " + std::to_string(reply.size()) + " bytes, over the limit of " +
                                   support::size_str(support::kMaxReplyBytes),
                "answer with the program alone, in one fenced block");
    return std::nullopt;
  }
  auto blocks = fenced_blocks(reply);
  const FencedBlock* pick = nullptr;
  for (const auto& b : blocks)
    if (std::find(langs.begin(), langs.end(), b.lang) != langs.end()) pick = &b;
  if (!pick) {
    int unlabelled = 0;
    for (const auto& b : blocks)
      if (b.lang.empty()) ++unlabelled, pick = &b;
    if (unlabelled != 1) pick = nullptr;
  }
  const std::string want = langs.empty() ? std::string("code") : langs.front();
  if (!pick) {
    std::string seen;
    for (const auto& b : blocks) seen += (seen.empty() ? "" : ", ") + (b.lang.empty() ? std::string("unlabelled") : b.lang);
    diags.error("LLM0201", {}, "the reply has no ```" + want + " block" + (blocks.empty() ? std::string(" (no fenced code at all)")
                                                                                           : " (found: " + seen + ")"),
                "answer with the complete program in one fenced block that starts with ```" + want + " and ends with ```");
    return std::nullopt;
  }
  if (pick->text.find_first_not_of(" \t\r\n") == std::string::npos) {
    diags.error("LLM0202", {pick->line, 1}, "the ```" + want + " block of the reply is empty",
                "put the complete program inside the ```" + want + " block");
    return std::nullopt;
  }
  return pick->text;
}

}  // namespace qattn::llm
