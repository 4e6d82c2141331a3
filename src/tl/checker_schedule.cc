// TL checker, the Hopper (sm90) schedule (docs/tl.md, "Hopper schedule"): the warp Role statements
// and the schedule attributes `stages`, `async`, `wait`, `release`, `overlap` and `persistent`.
//   TL0702 Role misplaced (inside a loop, after an Allocate) or declared twice
//   TL0703 Role warpgroups not a positive compile-time integer (at most 8 warpgroups in all)
//   TL0704 Role registers not a compile-time integer in [24, 256] and a multiple of 8
//   TL0705 the roles' registers exceed the SM's register file (128 threads per warpgroup)
//   TL0706 `pingpong` on the producer, or with fewer than 2 consumer warpgroups
//   TL0707 async copies / wait / release without the two Roles; a Role without its partner
//   TL0708 `stages` not on a shared Allocate, or not a compile-time integer in [1, 64]
//   TL0709 `async` not on a global -> shared Copy (or with a value); a synchronous Copy into a
//          buffer that async Copies fill
//   TL0710 `wait` / `release` that does not name a shared buffer some async Copy fills
//   TL0711 a read of an async-filled buffer not preceded by a wait on every path since its copy
//   TL0712 a read of a buffer after its release (before the next async copy)
//   TL0713 a loop body that copies a buffer asynchronously more often than it releases it
//   TL0714 an async copy into a 1-stage buffer that is still held (waited or pending, not released)
//   TL0715 `overlap` not on a loop of the flash-attention form
//   TL0716 a release of a buffer this iteration does not hold (not waited, already released)
//   TL0717 `persistent` not on the Grid statement, or with a value
//   TL0718 `stage` not on a statement of an `{overlap}` loop, or not 0 / 1
//   TL0719 `split columns` on the producer, with fewer than 2 consumer warpgroups, or with `pingpong`
//   TL0720 `wait` / `release` naming a shared view (`{view: K}`): its base K's slots are waited for
// The async-copy protocol is a forward data-flow analysis: each async-filled buffer has a set of
// possible states {empty, pending, held, released}; loops iterate to a fixed point (the first
// iteration and the back edge), then the body is walked once more to report. Names only: the
// structural pass (checker.cc) reports undeclared buffers.
#include <algorithm>
#include <functional>

#include "tl/checker_internal.h"
#include "tl/eval.h"

namespace qattn::tl::detail {
namespace {

constexpr int kMaxStages = 64;
constexpr int kMaxWarpgroups = 8;          // 1024 threads per block
constexpr int64_t kRegisterFile = 65536;   // 32-bit registers per SM
constexpr int kThreadsPerWarpgroup = 128;
constexpr long kVisitBudget = 1000000;     // statement visits of the flow analysis

constexpr const char* kRolesHint =
    "declare the warp roles after the Grid/Let lines, before the first Allocate: `Role producer warpgroups 1 "
    "registers 24` and `Role consumer warpgroups 2 registers 240`";

enum : uint8_t { kEmpty = 1, kPending = 2, kHeld = 4, kReleased = 8 };
using State = std::map<std::string, uint8_t>;

bool has_attr(const Stmt& s, const char* key) {
  for (const auto& a : s.attrs)
    if (a.key == key) return true;
  return false;
}
// " = 3" after an expression that is not a literal (`STAGES` = 3), else "".
std::string value_of(const Expr& e, const std::optional<int64_t>& v) {
  return v && e.kind != Expr::Kind::Number ? " = " + std::to_string(*v) : std::string();
}
bool is_g2s(const Stmt& s) {
  return s.kind == Stmt::Kind::Copy && s.copy.from == Space::Global && s.copy.to == Space::Shared;
}
bool is_async_copy(const Stmt& s) { return is_g2s(s) && has_attr(s, "async"); }
bool is_store_of_o(const Stmt& s) {
  return s.kind == Stmt::Kind::Copy && s.copy.from == Space::Register && s.copy.to == Space::Global && s.copy.name == "O";
}
const std::string* attr_name(const Attr& a) {
  return a.value && a.value->kind == Expr::Kind::Name ? &a.value->name : nullptr;
}

void walk_all(const std::vector<Stmt>& body, int depth, const std::function<void(const Stmt&, int)>& f) {
  for (const auto& s : body) {
    f(s, depth);
    if (s.kind == Stmt::Kind::For) walk_all(s.loop.body, depth + 1, f);
  }
}

// The flash-attention form: a GEMM producing a tile (`and get S`) followed by a GEMM accumulating
// into an output (`and accumulate O`), both in the loop body itself.
bool flash_form(const ForStmt& f) {
  bool scores = false;
  for (const auto& s : f.body) {
    if (s.kind != Stmt::Kind::Compute || s.compute.op != "GEMM") continue;
    if (s.compute.result == ComputeStmt::Result::Get) scores = true;
    if (s.compute.result == ComputeStmt::Result::Accumulate && scores) return true;
  }
  return false;
}

class Schedule {
 public:
  Schedule(const Program& p, const std::set<const Stmt*>& poisoned, Reporter& rep, CheckInfo& info)
      : prog_(p), poisoned_(poisoned), rep_(rep), info_(info) {}

  void run() {
    constants();
    roles();
    attributes();
    if (!async_.empty()) flow();
    ScheduleInfo& si = info_.schedule;
    for (const auto& n : async_)
      if (!si.stages.count(n)) si.stages[n] = 1;
    si.async_buffers = async_;
  }

 private:
  void error(const char* code, SrcLoc loc, SrcLoc fallback, const std::string& msg, const std::string& hint) {
    rep_.error(code, pick(loc, fallback), msg, hint);
  }
  std::optional<int64_t> constant(const Expr& e) const { return eval_int(e, env_, nullptr); }

  // Fixed Dims and Consts, in order: what a compile-time integer may use.
  void constants() {
    for (const auto& s : prog_.stmts) {
      if (s.kind == Stmt::Kind::Dim) {
        for (const auto& it : s.dim.items)
          if (it.value)
            if (auto v = constant(*it.value)) env_.ints.emplace(it.name, *v);
      } else if (s.kind == Stmt::Kind::Const) {
        for (const auto& it : s.cnst.items)
          if (auto v = constant(it.value)) env_.ints.emplace(it.name, *v);
      }
    }
  }

  // ---- Role statements ---------------------------------------------------------------------
  void roles() {
    const Stmt* first_alloc = nullptr;
    const Stmt* role[2] = {nullptr, nullptr};  // [0] consumer, [1] producer
    int wg[2] = {0, 0}, regs[2] = {0, 0};
    bool valid[2] = {false, false};
    walk_all(prog_.stmts, 0, [&](const Stmt& s, int depth) {
      if (s.kind == Stmt::Kind::Allocate && !first_alloc) first_alloc = &s;
      if (s.kind != Stmt::Kind::Role) return;
      const RoleStmt& r = s.role;
      const std::string who = r.producer ? "producer" : "consumer";
      if (depth > 0) {
        error("TL0702", s.loc, s.loc, "Role inside a loop body",
              "the warp roles are part of the program header: move `Role " + who +
                  " ...` to the top, after the Grid/Let lines and before the first Allocate");
        return;
      }
      if (first_alloc) {
        error("TL0702", s.loc, s.loc,
              "Role after an Allocate (line " + line_of(first_alloc->loc) + "): the warp roles come before the buffers",
              "move `Role " + who + " ...` above line " + line_of(first_alloc->loc) + ", after the Grid/Let lines");
      }
      const int i = r.producer ? 1 : 0;
      if (role[i]) {
        error("TL0702", s.loc, s.loc, "a second " + who + " Role (the first is at line " + line_of(role[i]->loc) + ")",
              "a program declares one producer Role and one consumer Role: remove this line (set the warpgroup count "
              "on the first)");
        return;
      }
      role[i] = &s;
      if (poisoned_.count(&s)) return;  // an undeclared name: reported by the structural pass
      bool ok = true;
      auto w = constant(r.warpgroups);
      if (!w || *w < 1 || *w > kMaxWarpgroups) {
        ok = false;
        error("TL0703", r.warpgroups.loc, s.loc,
              "warpgroups must be a compile-time integer from 1 to " + std::to_string(kMaxWarpgroups) + " (a number or Const names); found `" +
                  fmt_expr(r.warpgroups) + "`" + value_of(r.warpgroups, w),
              r.producer ? "write `Role producer warpgroups 1 registers 24` (one producer warpgroup issues every async copy)"
                         : "write `Role consumer warpgroups 2 registers 240` (one consumer warpgroup per 64 query rows: BM / 64)");
      }
      auto g = constant(r.registers);
      if (!g || *g < 24 || *g > 256 || *g % 8 != 0) {
        ok = false;
        std::string fix;
        if (g) {
          int64_t v = std::min<int64_t>(256, std::max<int64_t>(24, *g / 8 * 8));
          fix = "write `registers " + std::to_string(v) + "`; ";
        }
        error("TL0704", r.registers.loc, s.loc,
              "registers must be a compile-time integer from 24 to 256 and a multiple of 8 (setmaxnreg); found `" +
                  fmt_expr(r.registers) + "`" + value_of(r.registers, g),
              fix + "FlashAttention-3 gives the producer 24 and 2 consumer warpgroups 240, or the producer 32 and 3 consumer "
                    "warpgroups 160");
      }
      if (r.pingpong && r.producer) {
        error("TL0706", s.loc, s.loc, "`pingpong` on the producer Role: it alternates consumer warpgroups",
              "remove `pingpong` here and write it on the consumer Role: `Role consumer warpgroups 2 registers 240 pingpong`");
      }
      if (r.split_columns && r.producer) {
        error("TL0719", s.loc, s.loc, "`split columns` on the producer Role: it divides the consumer warpgroups' columns",
              "remove `split columns` here and write it on the consumer Role: `Role consumer warpgroups 2 registers 232 split "
              "columns`");
      }
      if (ok) {
        wg[i] = int(*w);
        regs[i] = int(*g);
        valid[i] = true;
      }
    });
    ScheduleInfo& si = info_.schedule;
    si.present = role[0] || role[1];
    roles_ = role[0] && role[1];
    if (role[0] != nullptr) {
      const RoleStmt& c = role[0]->role;
      si.pingpong = c.pingpong;
      si.consumer_wg = wg[0];
      si.consumer_regs = regs[0];
      if (c.pingpong && valid[0] && wg[0] < 2) {
        error("TL0706", role[0]->loc, role[0]->loc,
              "`pingpong` alternates two consumer warpgroups, but this Role has " + std::to_string(wg[0]),
              "remove `pingpong`, or declare `Role consumer warpgroups 2 ...` (BM = 128)");
      }
      // split columns: every consumer warpgroup holds every row, a share of the columns
      if (c.split_columns && c.pingpong) {
        error("TL0719", role[0]->loc, role[0]->loc,
              "`split columns` together with `pingpong`: split warpgroups work on the same rows in lockstep (their row "
              "statistics are combined every tile), so they cannot take turns",
              "keep one: `Role consumer warpgroups 2 registers 232 split columns` (one query tile, its columns split) or `... "
              "pingpong` (two tiles of rows, alternating)");
      } else if (c.split_columns && valid[0] && wg[0] < 2) {
        error("TL0719", role[0]->loc, role[0]->loc,
              "`split columns` divides the columns among the consumer warpgroups, but this Role has " + std::to_string(wg[0]),
              "remove `split columns`, or declare `Role consumer warpgroups 2 registers 232 split columns`");
      }
      si.split_columns = c.split_columns;
    }
    if (role[1] != nullptr) {
      si.producer_wg = wg[1];
      si.producer_regs = regs[1];
    }
    if ((role[0] != nullptr) != (role[1] != nullptr)) {
      const Stmt* r = role[0] ? role[0] : role[1];
      error("TL0707", r->loc, r->loc,
            std::string("a ") + (role[0] ? "consumer" : "producer") + " Role without a " + (role[0] ? "producer" : "consumer") +
                " Role: warp specialisation needs both",
            role[0] ? "add `Role producer warpgroups 1 registers 24` before this line"
                    : "add `Role consumer warpgroups 2 registers 240` after this line");
    }
    if (valid[0] && valid[1]) {
      const Stmt* later = role[0]->loc.line > role[1]->loc.line ? role[0] : role[1];
      const int64_t need = int64_t(kThreadsPerWarpgroup) * (int64_t(wg[1]) * regs[1] + int64_t(wg[0]) * regs[0]);
      // setmaxnreg only moves the registers the block's threads got at launch: 65536 / threads each,
      // rounded down to 8 (at most 256); a setmaxnreg.inc beyond them waits for ever
      const int64_t wgs = std::max<int64_t>(int64_t(wg[0]) + wg[1], 1);
      const int64_t per_thread = std::min<int64_t>(kRegisterFile / (kThreadsPerWarpgroup * wgs) / 8 * 8, 256);
      const int64_t pool = per_thread * kThreadsPerWarpgroup * wgs;
      if (wg[0] + wg[1] > kMaxWarpgroups) {
        error("TL0705", later->loc, later->loc,
              "the roles have " + std::to_string(wg[0] + wg[1]) + " warpgroups (" + std::to_string(128 * (wg[0] + wg[1])) +
                  " threads); a block has at most 1024 threads (8 warpgroups)",
              "use fewer consumer warpgroups (one per 64 query rows)");
      } else if (need > pool) {
        int64_t room = (pool / kThreadsPerWarpgroup - int64_t(wg[1]) * regs[1]) / std::max(wg[0], 1) / 8 * 8;
        error("TL0705", later->loc, later->loc,
              "the roles need 128 x (" + std::to_string(wg[1]) + " x " + std::to_string(regs[1]) + " + " +
                  std::to_string(wg[0]) + " x " + std::to_string(regs[0]) + ") = " + std::to_string(need) +
                  " registers, more than the block's " + std::to_string(128 * wgs) + " threads hold at launch (" +
                  std::to_string(per_thread) + " each: 65536 / threads, a multiple of 8), which setmaxnreg only moves between them",
              room >= 24 ? "lower the consumer registers to at most " + std::to_string(std::min<int64_t>(room, 256)) +
                               " (FlashAttention-3: 24 / 240 with 2 consumer warpgroups, 32 / 160 with 3)"
                         : "use fewer warpgroups or fewer registers per thread (FlashAttention-3: 24 / 240 with 2 "
                           "consumer warpgroups, 32 / 160 with 3)");
      }
    }
  }

  // ---- attribute placement -----------------------------------------------------------------
  void attributes() {
    // Buffers that async Copies fill, and their first Copy; shared buffers by name.
    walk_all(prog_.stmts, 0, [&](const Stmt& s, int) {
      if (s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Shared)
        for (const auto& a : s.attrs)  // a view reads its base's slots (the structural pass checks the base)
          if (const std::string* b = a.key == "view" ? attr_name(a) : nullptr; b && *b != s.alloc.name) views_.emplace(s.alloc.name, *b);
    });
    walk_all(prog_.stmts, 0, [&](const Stmt& s, int) {
      // (a Copy into a view is TL0422: the view gets no ring)
      if (is_async_copy(s) && !async_.count(s.copy.name) && !views_.count(s.copy.name)) {
        async_.insert(s.copy.name);
        first_copy_[s.copy.name] = s.loc;
      }
      if (s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Shared) shared_.insert(s.alloc.name);
    });
    for (const auto& s : prog_.stmts)
      if (s.kind == Stmt::Kind::For && has_attr(s, "overlap"))
        for (const auto& b : s.loop.body) overlapped_.insert(&b);
    SrcLoc first_use;  // first async / wait / release, for TL0707
    walk_all(prog_.stmts, 0, [&](const Stmt& s, int) {
      if (s.kind == Stmt::Kind::Merge) return;  // its line takes `{rows}` only (TL0423, checker_merge.cc)
      bool stages_seen = false;
      for (const auto& a : s.attrs) {
        const SrcLoc at = pick(a.loc, s.loc);
        if (a.key == "stages") {
          stages_attr(s, a, stages_seen);
          stages_seen = true;
        } else if (a.key == "async" && is_store_of_o(s)) {
          // the O store: issued now, completed in the background (checked like any async store)
          if (a.value) error("TL0709", a.loc, s.loc, "`async` takes no value", "write `{async}`");
        } else if (a.key == "async") {
          if (!first_use.line) first_use = at;
          if (!is_g2s(s)) {
            std::string hint = "write `{async}` at the end of a `Copy X (tile) in coordinate [...] from global to shared`";
            if (s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Shared)
              hint = "put `{async}` on the Copy that fills " + s.alloc.name + " from global memory; its Allocate takes `{stages: N}`";
            error("TL0709", a.loc, s.loc,
                  "`async` applies to a Copy from global to shared memory (the producer's TMA copy)", hint);
          } else if (a.value) {
            error("TL0709", a.loc, s.loc, "`async` takes no value", "write `{async}`");
          }
        } else if (a.key == "stream") {
          // keys a launch reads once: loaded under an L2 evict-first hint when it streams them
          if (!is_async_copy(s))
            error("TL0709", a.loc, s.loc, "`stream` applies to an `{async}` Copy from global to shared (the producer's TMA copy)",
                  "write `{async, stream}` on the Copy that fills K or V");
          else if (a.value)
            error("TL0709", a.loc, s.loc, "`stream` takes no value", "write `{async, stream}`");
        } else if (a.key == "wait" || a.key == "release") {
          if (!first_use.line) first_use = at;
          const std::string* n = attr_name(a);
          if (!n) {
            error("TL0710", a.loc, s.loc, "`" + a.key + "` names the shared buffer it " + (a.key == "wait" ? "waits for" : "releases"),
                  "write `{" + a.key + ": K}`");
          } else if (views_.count(*n)) {
            const std::string& b = views_.at(*n);
            error("TL0720", a.loc, s.loc,
                  "`" + a.key + ": " + *n + "`: '" + *n + "' is a view of " + b + " (`{view: " + b + "}`), with no ring of its own: "
                      "its reads see " + b + "'s current slot",
                  "write `{" + a.key + ": " + b + "}`: " + (a.key == "wait" ? "wait for " : "release ") + b +
                      "'s tile, which the reads of " + *n + " use" +
                      (a.key == "release" ? " (after the last statement that reads " + b + " or " + *n + ")" : std::string()));
          } else if (!async_.count(*n)) {
            error("TL0710", a.loc, s.loc,
                  "`" + a.key + ": " + *n + "`: '" + *n + "' is not a shared buffer that an `{async}` Copy fills",
                  shared_.count(*n) ? "mark the Copy that fills it asynchronous (`Copy " + *n +
                                          " (...) in coordinate [...] from global to shared {async}`), or remove this attribute"
                                    : "name a shared buffer that an `{async}` Copy fills (Q, K, V), or remove this attribute");
          }
        } else if (a.key == "overlap") {
          if (s.kind != Stmt::Kind::For) {
            error("TL0715", a.loc, s.loc, "`overlap` is an attribute of the loop over key tiles",
                  "move `{overlap}` to the `for j = ...` line");
          } else if (a.value) {
            error("TL0715", a.loc, s.loc, "`overlap` takes no value", "write `{overlap}`");
          } else if (!flash_form(s.loop)) {
            error("TL0715", a.loc, s.loc,
                  "`overlap` needs a loop of the flash-attention form: a GEMM that produces the score tile (`Compute GEMM "
                  "Q, K^T and get S`) and a later GEMM that accumulates the output (`Compute GEMM P, V and accumulate O`)",
                  "remove `{overlap}`: this loop has no second GEMM to overlap with the softmax");
          } else {
            info_.schedule.overlap = true;
          }
        } else if (a.key == "stage") {
          if (!overlapped_.count(&s)) {
            error("TL0718", a.loc, s.loc, "`stage` applies to a statement of a loop with `{overlap}` (its software pipeline)",
                  "add `{overlap}` to the loop, or remove `{stage: ...}`");
          } else if (!a.value || a.value->kind != Expr::Kind::Number || !a.value->is_int ||
                     (a.value->value != 0 && a.value->value != 1)) {
            error("TL0718", a.loc, s.loc, "`stage` is 0 or 1", "write `{stage: 1}` (run after the next iteration's first GEMM) or `{stage: 0}`");
          }
        } else if (a.key == "persistent") {
          if (s.kind != Stmt::Kind::Grid) {
            error("TL0717", a.loc, s.loc, "`persistent` is an attribute of the Grid (how its points map to blocks)",
                  "move `{persistent}` to the `Grid m_block = ...` line");
          } else if (a.value) {
            error("TL0717", a.loc, s.loc, "`persistent` takes no value", "write `{persistent}`");
          } else {
            info_.schedule.persistent = true;
          }
        }
      }
      // Every copy into an async-filled buffer is async (one producer fills the ring).
      if (s.kind == Stmt::Kind::Copy && s.copy.to == Space::Shared && async_.count(s.copy.name) && !is_async_copy(s)) {
        error("TL0709", s.loc, s.loc,
              "'" + s.copy.name + "' is filled by `{async}` Copies (line " + line_of(first_copy_[s.copy.name]) +
                  "); this Copy into its shared buffer is synchronous",
              s.copy.from == Space::Global ? "mark this Copy `{async}` too" : "copy into another shared buffer");
      }
    });
    if (first_use.line && !roles_ && !info_.schedule.present) {
      error("TL0707", first_use, first_use,
            "asynchronous copies (`async`, `wait`, `release`) need the warp Roles: the producer warpgroup issues the copies, "
            "the consumer warpgroups wait for them",
            kRolesHint);
    }
  }

  void stages_attr(const Stmt& s, const Attr& a, bool repeated) {
    if (s.kind != Stmt::Kind::Allocate || s.alloc.space != Space::Shared) {
      std::string hint = "write `{stages: N}` at the end of the buffer's `Allocate X in shared (...)`";
      if (s.kind == Stmt::Kind::Copy)
        hint = "move `{stages: ...}` to `Allocate " + s.copy.name + " in shared (...)`; the Copy takes `{async}`";
      error("TL0708", a.loc, s.loc, "`stages` applies to the Allocate of a shared buffer (its ring of tiles)", hint);
      return;
    }
    if (repeated) {
      error("TL0708", a.loc, s.loc, "`stages` given twice for '" + s.alloc.name + "'", "keep one `{stages: N}`");
      return;
    }
    std::optional<int64_t> n = a.value ? constant(*a.value) : std::nullopt;
    if (!n || *n < 1 || *n > kMaxStages) {
      error("TL0708", a.loc, s.loc,
            "`stages` needs a compile-time integer from 1 to " + std::to_string(kMaxStages) + " (a number or Const names)" +
                (a.value ? "; found `" + fmt_expr(*a.value) + "`" + value_of(*a.value, n) : std::string()),
            "write `{stages: 2}` (or `{stages: STAGES}` with `Const STAGES = 2`)");
      return;
    }
    info_.schedule.stages[s.alloc.name] = int(*n);
  }

  // ---- the async-copy protocol -------------------------------------------------------------
  struct Flow {
    State st;
    std::set<std::string> reg;  // names with a register buffer in scope (GEMM operands read it)
  };
  struct LoopFrame {
    std::map<std::string, SrcLoc> last_read;  // last read of a buffer inside the loop
  };

  void overwrite(const Stmt& s, uint8_t v) {
    const std::string& n = s.copy.name;
    error("TL0714", s.loc, s.loc,
          "this async Copy overwrites " + n + " while " + n + " is still held (" + (v & kHeld ? "waited for" : "copied") +
              " and not released): " + n + " has 1 stage, so the tile in use would be overwritten",
          "add {release: " + n + "} to the last statement that reads " + n + " before this Copy, or give it a ring: `Allocate " +
              n + " in shared (...) {stages: 2}`");
  }

  int stages_of(const std::string& n) const {
    auto it = info_.schedule.stages.find(n);
    return it == info_.schedule.stages.end() ? 1 : it->second;
  }

  void flow() {
    Flow f;
    for (const auto& n : async_) f.st[n] = kEmpty;
    walk(prog_.stmts, f, true);
  }

  void walk(const std::vector<Stmt>& body, Flow& f, bool report) {
    for (const auto& s : body) {
      if (++visits_ > kVisitBudget) return;
      step(s, f, report);
    }
  }

  void read(const std::string& name, SrcLoc at, Flow& f, bool report) {
    auto view = views_.find(name);
    const std::string& n = view != views_.end() ? view->second : name;  // a view reads its base's current slot
    if (!async_.count(n)) return;
    const uint8_t v = f.st[n];
    if (!report) return;
    for (auto& l : loops_) l.last_read[n] = at;
    const std::string via = name == n ? std::string() : " (through its view " + name + ")";
    if (v & kPending) {
      error("TL0711", at, at,
            "reads " + n + via + " before waiting for its async copy (line " + line_of(first_copy_[n]) + "): " +
                (loops_.empty() ? "no `wait: " + n + "` comes between the copy and this read"
                                : "on some path (the loop's first iteration or its back edge) no `wait: " + n +
                                      "` comes between a copy of " + n + " and this read"),
            "add {wait: " + n + "} to this statement");
    }
    if (v & kReleased) {
      error("TL0712", at, at,
            "reads " + n + via + " after `release: " + n + "` gave its slot back to the producer, which may already be refilling it",
            "move {release: " + n + "} to the last statement that reads " + n + ", or copy " + n + " again before this read");
    }
  }

  void step(const Stmt& s, Flow& f, bool report) {
    // Waits happen before the statement.
    for (const auto& a : s.attrs) {
      const std::string* n = a.key == "wait" ? attr_name(a) : nullptr;
      if (!n || !async_.count(*n)) continue;
      uint8_t& v = f.st[*n];
      if (v & kPending) v = uint8_t((v & ~kPending) | kHeld);
    }
    switch (s.kind) {
      case Stmt::Kind::Allocate:
        if (s.alloc.space == Space::Shared && async_.count(s.alloc.name)) f.st[s.alloc.name] = kEmpty;
        if (s.alloc.space == Space::Register) f.reg.insert(s.alloc.name);
        break;
      case Stmt::Kind::Copy: {
        const CopyStmt& c = s.copy;
        if (c.from == Space::Shared) read(c.name, s.loc, f, report);
        if (c.to == Space::Register) f.reg.insert(c.name);
        if (c.to == Space::Shared && async_.count(c.name)) {
          uint8_t& v = f.st[c.name];
          if (is_async_copy(s)) {
            if (report && stages_of(c.name) == 1 && (v & (kPending | kHeld))) overwrite(s, v);
            v = kPending;
          } else {
            v = kHeld;  // a synchronous copy (TL0709): its data is there at once
          }
        }
        break;
      }
      case Stmt::Kind::Compute: {
        const ComputeStmt& c = s.compute;
        if (c.op == "GEMM") {
          for (const auto& o : c.operands)
            if (o.expr.kind == Expr::Kind::Name && !f.reg.count(o.expr.name)) read(o.expr.name, pick(o.loc, s.loc), f, report);
        }
        if (c.result == ComputeStmt::Result::Get) f.reg.insert(c.target);
        break;
      }
      case Stmt::Kind::For: loop(s, f, report); break;
      default: break;
    }
    // Releases happen after it.
    for (const auto& a : s.attrs) {
      const std::string* n = a.key == "release" ? attr_name(a) : nullptr;
      if (!n || !async_.count(*n)) continue;
      uint8_t& v = f.st[*n];
      if (report && (v & (kEmpty | kPending | kReleased))) {
        std::string why = v & kPending    ? "before waiting for its async copy"
                          : v & kReleased ? "again: it was already released on some path"
                                          : "before any async copy fills it";
        error("TL0716", pick(a.loc, s.loc), s.loc,
              "releases " + *n + " " + why + "; a release gives back the tile this iteration waited for",
              v & kPending ? "add {wait: " + *n + "} to this statement (or an earlier one that reads " + *n + ")"
                           : "release " + *n + " once per async copy, after its last read");
      }
      v = kReleased;
    }
  }

  void loop(const Stmt& s, Flow& f, bool report) {
    const std::set<std::string> reg_before = f.reg;
    Flow entry = f;
    Flow out = entry;
    for (int it = 0; it < 64 && visits_ <= kVisitBudget; ++it) {
      out = entry;
      walk(s.loop.body, out, false);
      State next = f.st;  // the first iteration, or the back edge
      for (const auto& [n, v] : out.st) next[n] |= v;
      if (next == entry.st) break;
      entry.st = std::move(next);
      entry.reg = reg_before;
    }
    if (report && visits_ <= kVisitBudget) {
      loops_.emplace_back();
      out = entry;
      walk(s.loop.body, out, true);
      LoopFrame fr = std::move(loops_.back());
      loops_.pop_back();
      // Balance: the body gives back as many tiles of each buffer as it copies (a release inside a
      // nested loop may run zero times and does not count). The order within the body is the
      // business of TL0711 / TL0712 / TL0716, so a prefetch at the end of the body is fine.
      std::map<std::string, int> copies, releases;
      std::map<std::string, const Stmt*> first;
      for (const auto& b : s.loop.body) {
        if (is_async_copy(b) && async_.count(b.copy.name)) {
          ++copies[b.copy.name];
          first.emplace(b.copy.name, &b);
        }
        for (const auto& a : b.attrs)
          if (a.key == "release")
            if (const std::string* n = attr_name(a)) ++releases[*n];
      }
      for (const auto& [n, k] : copies) {
        const int r = releases[n];
        if (r >= k) continue;
        auto lr = fr.last_read.find(n);
        std::string where = lr != fr.last_read.end() ? " (line " + line_of(lr->second) + ")" : "";
        const int st = stages_of(n);
        error("TL0713", first[n]->loc, first[n]->loc,
              "the loop copies " + n + " asynchronously " + (k == 1 ? "once" : std::to_string(k) + " times") +
                  " per iteration but " + (r == 0 ? "never releases it" : r == 1 ? "releases it once" : "releases it " + std::to_string(r) + " times") +
                  " in its body: once its ring (" + std::to_string(st) + " stage" + (st == 1 ? "" : "s") +
                  ") is full, the producer waits forever",
              "add {release: " + n + "} to the last statement of the loop body that reads " + n + where);
      }
    }
    for (const auto& [n, v] : out.st) f.st[n] |= v;  // zero or more iterations
    f.reg = reg_before;                               // names bound in the body end at `end`
  }

  const Program& prog_;
  const std::set<const Stmt*>& poisoned_;
  Reporter& rep_;
  CheckInfo& info_;
  Env env_;
  bool roles_ = false;                       // both Roles declared
  std::set<std::string> async_, shared_;
  std::map<std::string, std::string> views_;  // shared view -> its base (`Allocate V in shared ... {view: K}`)
  std::set<const Stmt*> overlapped_;         // the statements of loops with {overlap}
  std::map<std::string, SrcLoc> first_copy_;
  std::vector<LoopFrame> loops_;
  long visits_ = 0;
};

}  // namespace

bool is_schedule_attr(const std::string& key) {
  return key == "stages" || key == "async" || key == "wait" || key == "release" || key == "overlap" || key == "persistent" ||
         key == "stage" || key == "stream";
}

void Walker::role_stmt(const Stmt& s) {
  check_expr(s.role.warpgroups, Ctx::Static, s);
  check_expr(s.role.registers, Ctx::Static, s);
}

void check_schedule(const Program& p, const std::set<const Stmt*>& poisoned, Reporter& rep, CheckInfo& info) {
  Schedule(p, poisoned, rep, info).run();
}

}  // namespace qattn::tl::detail
