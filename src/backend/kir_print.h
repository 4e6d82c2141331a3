// The kernel IR as text (kernel.kir) and as the JSON of qattn_kernel_info(); see kir.h.
#pragma once
#include <string>

#include "backend/kir.h"

namespace qattn::backend::kir {

std::string print(const Kernel& k);      // kernel.kir
std::string info_json(const Kernel& k);  // what the generated library's qattn_kernel_info() returns
std::string op_text(const Op& op);       // one op, as print writes it

}  // namespace qattn::backend::kir
