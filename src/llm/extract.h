// Extraction of the fenced code block an LLM reply must carry: ```tl for stages 1a/1b, ```cuda
// (or ```cpp / ```c++ / ```cu) for stage 2 and the vanilla baseline. Fences are ``` or ~~~ of three or
// more characters, at any indentation; a fence closes with the same character, at least as long.
// An unclosed block runs to the end of the reply (a reply cut at max_tokens still shows its code).
// The LAST block whose info string names an accepted language is the answer (models often sketch
// first and correct themselves); with no labelled block, a single unlabelled block is taken.
// Diagnostics: LLM0201 no block of the language; LLM0202 the block is empty; LLM0203 the reply is
// larger than support::kMaxReplyBytes (4 MiB).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/diag.h"

namespace qattn::llm {

struct FencedBlock {
  std::string lang;  // first word of the info string, lower case ("tl", "cuda", "" when none)
  std::string text;  // the lines between the fences, each ending in '\n'
  int line = 0;      // 1-based line of the opening fence in the reply
  bool closed = true;
};

std::vector<FencedBlock> fenced_blocks(std::string_view reply);

// The answer block for `langs` (e.g. {"tl"} or {"cuda", "cpp", "c++", "cu"}).
std::optional<std::string> extract_block(std::string_view reply, const std::vector<std::string>& langs,
                                         support::DiagSink& diags);

}  // namespace qattn::llm
