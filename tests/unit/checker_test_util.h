// Helpers shared by the TL checker's unit tests (checker_test.cc, checker_schedule_test.cc):
// run the checker on a program text and find diagnostics by code and line.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/diag.h"
#include "tl/checker.h"
#include "tl/parser.h"

namespace qattn::tl::test {

// A flash-attention forward in the mma.sync form (operands copied to registers), no mask.
inline const char* kFlash = R"(Kernel flash_fwd with mask none
Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d
Const BM = 64, BN = 64
Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch
Let kv_head = head / (heads_q / heads_kv)

Allocate Q in global (seqlen_q, d) fp16 with offset [b, head]
Allocate K in global (seqlen_k, d) fp16 with offset [b, kv_head]
Allocate V in global (seqlen_k, d) fp16 with offset [b, kv_head]
Allocate O in global (seqlen_q, d) fp16 with offset [b, head]
Allocate Q in shared (BM, d) fp16
Allocate K in shared (BN, d) fp16
Allocate V in shared (BN, d) fp16
Allocate Q in register (BM, d) fp16
Allocate K in register (BN, d) fp16
Allocate V in register (BN, d) fp16
Allocate O in register (BM, d) fp32 init 0
Allocate m in register (BM) fp32 init -inf
Allocate l in register (BM) fp32 init 0

Copy Q (BM, d) in coordinate [m_block, 0] from global to shared
Copy Q from shared to register
for j = 0: cdiv(seqlen_k, BN)
  Copy K (BN, d) in coordinate [j, 0] from global to shared
  Copy K from shared to register
  Compute GEMM Q, K^T and get S
  Compute Multiply S, softmax_scale
  Compute Mask S at [m_block, j] with bounds
  Compute RowMax S and get m_tile
  Compute Max m, m_tile and get m_new
  Compute Subtract m, m_new and get alpha
  Compute Exp alpha
  Compute Subtract S, m_new and get P
  Compute Exp P
  Compute RowSum P and get l_tile
  Compute Rescale l, alpha
  Compute Add l, l_tile
  Compute Rescale O, alpha
  Compute Convert P and get P16 fp16
  Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)
  Copy V (BN, d) in coordinate [j, 0] from global to shared
  Copy V from shared to register
  Compute GEMM P16, V and accumulate O
  Compute Max m, m_new
end
Compute Normalize O, l
Copy O (BM, d) in coordinate [m_block, 0] from register to global
)";

inline std::string replace(std::string text, const std::string& from, const std::string& to) {
  auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << "test bug: '" << from << "' not in the program";
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

inline int line_of(const std::string& text, const std::string& needle) {
  auto pos = text.find(needle);
  if (pos == std::string::npos) return -1;
  int line = 1;
  for (size_t i = 0; i < pos; ++i) line += text[i] == '\n';
  return line;
}

struct Checked {
  std::vector<support::Diagnostic> diags;
  bool ok = false;
  std::string rendered;
  bool has(const std::string& code, int line = -1) const {
    for (const auto& d : diags) {
      if (d.code == code && (line < 0 || d.loc.line == line)) return true;
    }
    return false;
  }
  int count(const std::string& code) const {
    int n = 0;
    for (const auto& d : diags) n += d.code == code;
    return n;
  }
};

inline Checked run(const std::string& text, const CheckOptions& opts = {}) {
  support::DiagSink diags("test.tl");
  Program p = parse(text, diags, "test.tl");
  EXPECT_FALSE(diags.has_errors()) << "parse errors:\n" << diags.render();
  Checked c;
  c.ok = check(p, diags, opts);
  c.diags = diags.all();
  c.rendered = diags.render();
  return c;
}

#define EXPECT_CODE_AT(res, code, text, needle)                                               \
  EXPECT_TRUE((res).has(code, line_of(text, needle))) << "expected " << code << " at line " \
                                                     << line_of(text, needle) << "\n"       \
                                                     << (res).rendered

}  // namespace qattn::tl::test
