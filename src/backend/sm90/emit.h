// The sm90 emitter (see emit.cc): a verified kir::Kernel of family "wgmma" -> the .cu source (the
// kernel and the C ABI). Never fails and raises no diagnostics.
#pragma once
#include <string>

#include "backend/kir.h"

namespace qattn::backend::sm90 {

std::string emit(const kir::Kernel& k, const std::string& info_json);

}  // namespace qattn::backend::sm90
