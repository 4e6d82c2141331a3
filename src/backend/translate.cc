// Stage 2 driver (see translate.h and lowering.h). Hopper programs in the wgmma form: check ->
// lower to the kernel IR (sm90/lower.h) -> verify (kir_verify.h) -> emit from the IR (sm90/emit.h).
// The mma.sync families: check -> analyze -> describe the kernel IR -> verify -> emit (the statement
// walk of emit_kernel.cc, on the IR's pipeline and shared-memory plan).
#include "backend/translate.h"
#include "backend/bwd/lower.h"
#include "backend/combine/lower.h"

#include "backend/kir_print.h"
#include "backend/kir_verify.h"
#include "backend/lowering.h"
#include "backend/sm90/emit.h"
#include "backend/sm90/lower.h"
#include "tl/parser.h"

namespace qattn::backend {

std::vector<std::string> common_nvcc_flags() {
  return {"-O3", "-std=c++17", "--expt-relaxed-constexpr", "-DNDEBUG", "--use_fast_math"};
}

std::optional<Translation> translate(const tl::Program& code, const plan::Target& target, support::DiagSink& diags) {
  tl::CheckInfo info;
  support::DiagSink check_diags(diags.file());
  const bool ok = tl::check(code, check_diags, {}, info);
  for (const auto& d : check_diags.all()) diags.add(d);
  if (!ok) {
    diags.error("XL0001", {}, "the TL program does not pass the checker; nothing was translated",
                "fix the TL errors above (`qattn tl check`)");
    return std::nullopt;
  }
  for (const auto& st : code.stmts)
    if (st.kind == tl::Stmt::Kind::Kernel && st.kernel.backward) return bwd::translate(code, info, target, diags);  // src/backend/bwd
  for (const auto& st : code.stmts)
    if (st.kind == tl::Stmt::Kind::Kernel && st.kernel.combine) return combine::translate(code, info, target, diags);  // src/backend/combine
  detail::Lowering lowering(code, info, target, diags);
  const int before = diags.error_count();
  auto refused = [&]() -> std::optional<Translation> {
    if (diags.error_count() == before) diags.error("XL0301", {}, "the program cannot be lowered", "");
    return std::nullopt;
  };
  if (!lowering.analyze_front()) return refused();
  if (lowering.wgmma()) {
    // Hopper: TL -> kernel IR -> verified -> CUDA (src/backend/sm90/)
    auto k = sm90::Lower(lowering, code, info, target, diags).run();
    if (!k) return refused();
    if (!kir::verify(*k, diags)) return std::nullopt;
    Translation t;
    t.info_json = kir::info_json(*k);
    t.cuda_source = sm90::emit(*k, t.info_json);
    t.kernel_name = k->name;
    t.arch = k->arch;
    t.nvcc_flags = k->nvcc_flags;
    t.threads = k->launch.threads;
    t.smem_bytes = int(k->launch.smem_bytes);
    t.kir = kir::print(*k);
    t.split = true;
    return t;
  }
  // sm75 / sm80 / sm89: analysis -> the kernel IR (its plan) -> verified -> CUDA
  if (!lowering.analyze_mma()) return refused();
  const kir::Kernel k = lowering.describe();
  if (!kir::verify(k, diags)) return std::nullopt;
  Translation t = lowering.emit(k);
  if (diags.error_count() != before) return std::nullopt;
  return t;
}

std::optional<Translation> translate_text(std::string_view tl_text, const plan::Target& target, support::DiagSink& diags,
                                          const std::string& file) {
  if (!file.empty() && diags.file().empty()) diags.set_file(file);
  support::DiagSink parse_diags(diags.file());
  tl::Program p = tl::parse(tl_text, parse_diags, file);
  for (const auto& d : parse_diags.all()) diags.add(d);
  if (parse_diags.has_errors()) {
    diags.error("XL0001", {}, "the TL program does not parse; nothing was translated", "fix the TL errors above");
    return std::nullopt;
  }
  return translate(p, target, diags);
}

}  // namespace qattn::backend
