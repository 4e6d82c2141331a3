// The sm90 emitter (see emit.cc): a verified kir::Kernel of family "wgmma" -> the .cu source (the
// kernel and the C ABI). Never fails and raises no diagnostics.
#pragma once
#include <string>

#include "backend/kir.h"

namespace qattn::backend::sm90 {

std::string emit(const kir::Kernel& k, const std::string& info_json);
// TL `Merge split ... end`: the counting and the merge body after a tile's stores (merge.cc); empty
// when the kernel has no Merge.
std::string emit_merge(const kir::Kernel& k);

}  // namespace qattn::backend::sm90
