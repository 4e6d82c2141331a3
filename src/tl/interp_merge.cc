// TL interpreter, a split forward's `Merge AXIS ... end` (docs/tl.md, "Merging the parts in the
// kernel"): the merged outputs (the body's global O and LSE, poisoned like every output), and the
// run of the body once per tile of the other Grid axes after the whole grid ran (a kernel merges in
// the block that stores a tile's last part: every part is stored by then). In the body, O_part and
// LSE_part are the main program's O and LSE (the parts), O and LSE the merged outputs; the verdict
// (interp.cc) compares the merged ones with the reference.
#include "tl/interp_impl.h"

namespace qattn::tl::interp {

namespace {
std::string merged_key(const std::string& n) { return n + " (merged)"; }  // no TL name has a space
}  // namespace

// The Merge's O and LSE as its body declares them (dtype, shape, `{pack}`), beside the main
// program's parts; created with the globals so that their memory counts and make_inputs poisons them.
bool Machine::setup_merge_globals() {
  for (const char* n : {"O", "LSE"}) {
    auto part = globals_.find(n);
    if (part == globals_.end() || part->second.parts == 0)
      return error("TL0901", merge_->loc,
                   "Merge " + merge_->loop.var + " in a program whose " + n + " holds no parts (its offset is not [b, " +
                       merge_->loop.var + ", head])",
                   "a Merge ends a forward program that splits the keys: O and LSE at [b, s, head]");
    const Stmt* decl = nullptr;
    for (const auto& s : merge_->loop.body)
      if (s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Global && s.alloc.name == n && !decl) decl = &s;
    if (!decl)
      return error("TL0901", merge_->loc, std::string("the Merge block does not allocate ") + n + " in global",
                   "a Merge writes the merged O and LSE: `Allocate O in global (seqlen_q, d) bf16 with offset [b, head]`");
    Global g;
    g.name = n;
    g.loc = decl->loc;
    g.output = true;
    g.dtype = decl->alloc.dtype.value_or(std::string(n) == "LSE" ? DType::F32 : DType::F16);
    if (!eval_view(decl->alloc, std::string("global ") + n + " of the Merge block", g.view)) return false;
    if (g.view != part->second.view)
      return error("TL0901", decl->loc,
                   std::string("the Merge's ") + n + " is " + shape_str(g.view) + " but the parts are " + shape_str(part->second.view),
                   "declare the merged output with the shape of the main program's");
    for (const auto& at : decl->attrs) {
      if (at.key != "pack" || !at.value) continue;
      auto v = eval_int(*at.value, header_env_, &diags_);
      if (!v) return false;
      if (*v < 1 || *v > (int64_t(1) << 20))
        return error("TL0901", at.loc.line ? at.loc : decl->loc, "`pack` of the Merge's " + std::string(n) + " is " + std::to_string(*v));
      g.pack = *v;
    }
    globals_[merged_key(n)] = std::move(g);
  }
  return true;
}

bool Machine::run_merge(const Program& p) {
  // The parts become the body's inputs O_part / LSE_part (never written there); the merged outputs its O / LSE.
  for (const std::string n : {"O", "LSE"}) {
    Global part = std::move(globals_[n]);
    part.name = n + "_part";
    part.output = false;
    globals_[n] = std::move(globals_[merged_key(n)]);
    globals_.erase(merged_key(n));
    globals_[n + "_part"] = std::move(part);
  }
  // Each merge block: the main program's Lets at its tile (those that read the split axis mean
  // nothing there, and are left out), then the body.
  const std::string& axis = merge_->loop.var;
  std::vector<Stmt> body;
  std::set<std::string> hidden = {axis};
  for (const auto& s : p.stmts) {
    if (s.kind != Stmt::Kind::Let) continue;
    bool reads = false;
    for (const auto& h : hidden) reads = reads || expr_reads(s.let.value, h);
    if (reads) hidden.insert(s.let.name);
    else body.push_back(s);
  }
  body.insert(body.end(), merge_->loop.body.begin(), merge_->loop.body.end());
  std::vector<GridVar> grid;
  for (const auto& g : grid_)
    if (g.name != axis) grid.push_back(g);
  const int64_t blocks = blocks_;
  in_merge_ = true;
  const bool ok = run_blocks(body, grid);
  in_merge_ = false;
  merge_blocks_ = blocks_ - blocks;
  blocks_ = blocks;
  return ok;
}

}  // namespace qattn::tl::interp
