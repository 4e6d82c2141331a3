// The kernel IR's own helpers (see kir.h).
#include "backend/kir.h"

namespace qattn::backend::kir {

void registers_of(const Op& op, std::set<std::string>& r, std::set<std::string>& w) {
  using K = Op::Kind;
  switch (op.kind) {
    case K::GemmSS:
      if (op.accumulate) r.insert(op.result);
      w.insert(op.result);
      break;
    case K::GemmRS:
      r.insert(op.a);
      r.insert(op.result);
      w.insert(op.result);
      break;
    case K::Scale: case K::Mask: case K::Modify: case K::QuadSum: case K::RowCombine:
      r.insert(op.a);
      w.insert(op.a);
      break;
    case K::RowMax: case K::RowSum: case K::Ew: case K::EwRows: case K::EwScalar: case K::Map: case K::Convert:
      r.insert(op.a);
      if (!op.b.empty()) r.insert(op.b);
      if (op.accumulate) r.insert(op.result);
      w.insert(op.result);
      break;
    case K::Rescale: case K::Normalize:
      r.insert(op.a);
      r.insert(op.b);
      w.insert(op.a);
      break;
    case K::Copy:
      r.insert(op.a);
      w.insert(op.result);
      break;
    case K::Fill: w.insert(op.a); break;
    case K::StoreO: case K::StoreRows: case K::StoreShared: r.insert(op.a); break;
    default: break;
  }
}


}  // namespace qattn::backend::kir
