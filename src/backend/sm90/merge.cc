// sm90 lowering of TL `Merge split ... end` (docs/tl.md, "Merging the parts in the kernel"): the
// body, a combine program's statements over the forward's packed views, lowered by the row-wise
// lowering (src/backend/rowwise.h) onto strips of the consumer warpgroup's rows; the emitter runs it
// in the warpgroup that counts its rows' last part (qattn/sm90/merge.cuh).
//
// What the TL states: the merge's statements (the loop over the parts, the math, the stores), the
// rows at a time (`{rows: R}`). What is chosen here: the strips of a warpgroup's 64 rows (R, or
// 16 / 8 / 4 rows as d_v grows when the TL says nothing, so that one part's strip is at most 16
// values a thread), the row addresses of the packed views, an unrolled block's loads written before
// its math (Strip::hoist_loads: one warpgroup merges, with no other warps to hide the latency
// behind; written in order, each part's loads waited for the previous part's math, one L2 round
// trip a part: 0.46-0.83x the two-launch merge on an H200, bench/results/2026-11-30-h200-merge).
// The parts are read by plain loads after merge_arrive's fences (the memory model orders them
// after the other blocks' stores).
#include <algorithm>

#include "backend/rowwise.h"
#include "backend/sm90/emit.h"
#include "backend/sm90/lower.h"
#include "tl/printer.h"

namespace qattn::backend::sm90 {

bool Lower::lower_merge(const tl::Stmt& s) {
  kir::Sm90::Merge& m = k_.sm90.merge;
  if (m.on) return error("XL0301", s.loc, "a second Merge", "one `Merge split ... end`, the program's last statement");
  if (!k_.launch.split)
    return error("XL0301", s.loc, "Merge in a kernel that does not split its keys",
                 "the Grid's fourth axis is the part (`split = 0: splits`), O and LSE at [b, split, head]");
  if (!k_.scope.q_start_cpp.empty())
    return error("XL0301", s.loc, "Merge over ragged queries is not lowered (the parts' rows are each sequence's)",
                 "merge the parts with a combine program over the packed rows (`qattn plan --combine`)");
  if (k_.roles.split_columns)
    return error("XL0301", s.loc, "Merge with split columns is not lowered (each warpgroup stores half of O's columns)",
                 "merge the parts with a combine program (`qattn plan --combine`)");
  if (k_.sm90.bm % (64 * k_.roles.consumer_wg) != 0 && k_.sm90.bm != 64 * k_.roles.consumer_wg)
    return error("XL0301", s.loc, "Merge over a tile that is not 64 rows per consumer warpgroup", "");
  m.on = true;
  m.tl = ref(s);
  int64_t rows = 0;
  for (const auto& a : s.attrs) {
    if (a.key != "rows") return error("XL0301", a.loc, "the attribute `" + a.key + "` is not lowered on a Merge", "`{rows: R}` or none");
    support::DiagSink quiet(diags_.file());
    auto v = a.value ? tl::eval_int(*a.value, tl::Env{f_.env_, {}}, &quiet) : std::nullopt;
    if (!v || *v < 4 || 64 % *v != 0)
      return error("XL0202", a.loc, "`{rows: " + (a.value ? tl::print_expr(*a.value) : std::string()) + "}` is not lowered",
                   "the rows merged at a time are 4, 8, 16, 32 or 64 (a warpgroup's 64 rows in strips over its 4 warps)");
    rows = *v;
  }
  m.cols = int(k_.d_v);
  if (rows == 0) rows = k_.d_v <= 128 ? 16 : k_.d_v <= 256 ? 8 : 4;
  m.rows = int(rows);

  tl::Env env{f_.env_, {}};
  const bool packed = k_.sm90.pack;
  // the merge's global views: its outputs O / LSE at [b, head] and the parts O_part / LSE_part at
  // [b, part, head], row r of a packed view query r / G of head head * G + r % G (G = p.pack, 1 unpacked)
  auto bind = [&](CudaOut& w, const tl::Stmt& st) -> std::optional<rowwise::GlobalView> {
    const auto& a = st.alloc;
    const bool part = a.name == "O_part" || a.name == "LSE_part";
    const bool vec = a.name == "LSE" || a.name == "LSE_part";
    if (!(part || a.name == "O" || a.name == "LSE") || a.offset.size() != (part ? 3u : 2u)) {
      error("XL0301", st.loc, "global " + a.name + " in a Merge is not lowered",
            "a Merge reads O_part / LSE_part at [b, part, head] and writes O / LSE at [b, head]");
      return std::nullopt;
    }
    bool has_pack = false;
    for (const auto& at : st.attrs) has_pack |= at.key == "pack";
    if (has_pack != packed) {
      error("XL0301", st.loc, "global " + a.name + (packed ? " without" : " with") + " the forward's {pack}",
            "the merge's views pack the query heads as the forward's O does");
      return std::nullopt;
    }
    const std::string b = "int64_t(" + kernel_names_.int_expr(a.offset[0]) + ")";
    const std::string h = "int64_t(" + kernel_names_.int_expr(a.offset[part ? 2 : 1]) + ") * p.pack";
    const std::string entry = part ? "(" + b + " * v.splits + " + kernel_names_.int_expr(a.offset[1]) + ")" : b;
    rowwise::GlobalView g;
    g.var = "g_" + names_.ident(a.name);
    g.rows = "(" + kernel_names_.int_expr(a.shape[0]) + ") * p.pack";
    if (vec) {
      const std::string base = part ? "p.lse" : "p.lse_merged";
      w.line(std::string(part ? "const " : "") + "float* " + g.var + " = " + base + " ? " + base + " + (" + entry +
             " * v.heads_q + " + h + ") * v.seqlen_q : nullptr;");
      g.row_stride = "qattn::rows::RowAddr(1, v.seqlen_q, p.pack)";
      g.vec = true;
    } else if (part) {
      w.line("const Element* " + g.var + " = static_cast<const Element*>(p.o) + " + entry + " * p.o_batch_stride + " + h +
             " * p.o_head_stride;");
      g.row_stride = "qattn::rows::RowAddr(p.o_row_stride, p.o_head_stride, p.pack)";
    } else {
      w.line("Element* " + g.var + " = static_cast<Element*>(p.o_merged) + " + b + " * p.om_batch_stride + " + h +
             " * p.om_head_stride;");
      g.row_stride = "qattn::rows::RowAddr(p.om_row_stride, p.om_head_stride, p.pack)";
    }
    return g;
  };
  rowwise::Body body("merge", kernel_names_, env, diags_, bind);
  body.set_strip({rows, 4, "merge_row0", true});
  if (!body.tiling(s.loop.body, s.loc)) return false;
  if (body.cols() != k_.d_v)
    return error("XL0202", s.loc, "the Merge's tiles have " + std::to_string(body.cols()) + " columns, O has " + std::to_string(k_.d_v),
                 "merge (BM, d_v) tiles");
  CudaOut w;
  body.emit(w, s.loop.body);
  if (body.failed()) return false;
  m.code = w.str();
  return true;
}

// TL `Merge split ... end`: after the stores of its rows' part, each consumer warpgroup counts the
// part (qattn/sm90/merge.cuh); the one that counts the last part merges its 64 rows in strips of
// merge.rows, the strips past the sequence's rows skipped. A warpgroup without a valid row neither
// counts nor merges (the same in every part).
std::string emit_merge(const kir::Kernel& k) {
  const kir::Sm90::Merge& m = k.sm90.merge;
  if (!m.on) return {};
  CudaOut w;
  const kir::Scope& sc = k.scope;
  const std::string mb = "v." + sc.grid[0].cpp, head = "v." + sc.grid[1].cpp, b = "v." + sc.grid[2].cpp;
  const std::string bm = std::to_string(k.sm90.bm), R = std::to_string(m.rows);
  w.line("// TL " + std::to_string(m.tl.line) + ": " + m.tl.text + "  (the warpgroup that counts its rows' last part merges them)");
  w.open("{");
  w.line("const int merge_rows = v.seqlen_q * p.pack;  // the tile's packed rows");
  w.line("int* merge_counter = p.merge_counters + ((int64_t(" + b + ") * p.merge_heads + " + head + ") * p.merge_m_blocks + " + mb +
         ") * kConsumers + cw;");
  w.open("if (" + mb + " * " + bm + " + 64 * cw < merge_rows && merge_arrive<true>(merge_counter, v.splits, kBarEpilogueBase + cw, tid)) {");
  w.line("using Tiling = qattn::rows::RowTiling<" + R + ", " + std::to_string(m.cols) + ", 4>;");
  w.open("for (int merge_strip = 0; merge_strip < 64 / " + R + "; ++merge_strip) {");
  w.line("const int merge_row0 = 64 * cw + merge_strip * " + R + ";  // the strip's first row in the tile");
  w.line("if (" + mb + " * " + bm + " + merge_row0 >= merge_rows) break;");
  // the body's lines, written by the row-wise lowering at its own indentation: placed at this depth
  for (size_t pos = 0; pos < m.code.size();) {
    size_t nl = m.code.find('\n', pos);
    if (nl == std::string::npos) nl = m.code.size();
    if (nl > pos) w.line(m.code.substr(pos, nl - pos));
    pos = nl + 1;
  }
  w.close();
  w.close();
  w.close();
  return w.str();
}

}  // namespace qattn::backend::sm90
