// The sm90 emitter (see emit.cc): a verified kir::Kernel of family "wgmma" -> the .cu source (the
// kernel and the C ABI). Never fails and raises no diagnostics.
#pragma once
#include <string>

#include "backend/kir.h"
#include "backend/lowering.h"

namespace qattn::backend::sm90 {

std::string emit(const kir::Kernel& k, const std::string& info_json);
// TL `Merge split ... end`: the counting and the merge body after a tile's stores (merge.cc); empty
// when the kernel has no Merge.
std::string emit_merge(const kir::Kernel& k);
inline std::string cpp_bool(bool b) { return b ? "true" : "false"; }
// the C ABI of the kernel (emit_abi.cc), after its device code
void emit_abi(detail::Writer& w, const kir::Kernel& k, const std::string& info_json);

}  // namespace qattn::backend::sm90
