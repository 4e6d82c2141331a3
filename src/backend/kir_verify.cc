// The kernel IR verifier (see kir_verify.h): what the lowering promised, checked again on the
// finished Kernel before anything is emitted.
#include "backend/kir_verify.h"

#include <algorithm>
#include <map>
#include <set>

#include "backend/arch.h"
#include "backend/kir_print.h"
#include "hw/sm90_policy.h"

namespace qattn::backend::kir {

namespace {

class Verifier {
 public:
  Verifier(const Kernel& k, support::DiagSink& d) : k_(k), d_(d) {}

  bool run() {
    if (k_.family == "mma") return mma_shape() && mma_smem() && mma_gemms() && mma_pipeline();
    if (k_.family != "wgmma") return fail("unknown kernel family `" + k_.family + "`");
    return smem() && roles() && registers() && kinds() && gemms() && turns() && rings() && stores();
  }

 private:
  bool fail(const std::string& what) {
    d_.error("XL0901", {}, "the kernel IR of " + k_.name + " is inconsistent: " + what,
             "a translator bug: please report it with the TL program and kernel.kir (`qattn_translate --kir`)");
    return false;
  }
  const SharedBuf* buf(const std::string& n) const {
    for (const auto& b : k_.smem)
      if (b.name == n) return &b;
    return nullptr;
  }
  const Reg* reg(const std::string& n) const {
    for (const auto& r : k_.sm90.regs)
      if (r.name == n) return &r;
    return nullptr;
  }
  std::vector<const std::vector<Op>*> blocks() const {
    const Sm90& h = k_.sm90;
    return {&h.before, &h.loop.first, &h.loop.steady, &h.released_after_loop, &h.loop.drain, &h.after};
  }

  // ---- mma.sync kernels
  // Every warp owns whole 16-row MMA slices of the tile.
  bool mma_shape() {
    const Mma& m = k_.mma;
    if (m.warps < 1 || m.warps > 16) return fail(std::to_string(m.warps) + " warps");
    if (m.tile_m <= 0 || m.tile_m % (16 * m.warps) != 0)
      return fail("a " + std::to_string(m.tile_m) + "-row tile over " + std::to_string(m.warps) + " warps of 16-row MMAs");
    if (k_.launch.threads != 32 * m.warps) return fail("threads do not match the warps");
    if (m.stages < 1) return fail(std::to_string(m.stages) + " pipeline stages");
    return true;
  }
  // The buffers sit at 128-byte aligned, disjoint offsets; the block's shared memory holds them and
  // the O staging of the epilogue, within the target's limit.
  bool mma_smem() {
    int64_t end = 0;
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const auto& b : k_.smem) {
      if (b.offset % 128 != 0) return fail("shared " + b.name + " at offset " + std::to_string(b.offset) + " is not 128-byte aligned");
      const int64_t want = int64_t(b.rows) * b.cols * b.stages * dtype_bytes(b.dtype);
      if (b.bytes != want) return fail("shared " + b.name + " holds " + std::to_string(b.bytes) + " bytes for " + std::to_string(want));
      spans.push_back({b.offset, b.offset + b.bytes});
      end = std::max(end, b.offset + (b.bytes + 127) / 128 * 128);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second) return fail("shared buffers overlap at byte " + std::to_string(spans[i].first));
    if (k_.launch.smem_bytes != std::max(end, k_.mma.epilogue_bytes))
      return fail("the block's " + std::to_string(k_.launch.smem_bytes) + " bytes of shared memory are not its tiles' " +
                  std::to_string(end) + " or the O staging's " + std::to_string(k_.mma.epilogue_bytes));
    if (k_.smem_limit > 0 && k_.launch.smem_bytes > k_.smem_limit)
      return fail("it needs " + std::to_string(k_.launch.smem_bytes) + " bytes of shared memory; the target has " +
                  std::to_string(k_.smem_limit));
    return true;
  }
  // A GEMM's B is a shared buffer; its A is where the plan says (a streamed or resident A operand
  // lives in shared memory, a register A is not a buffer); fp8's untransposed B has its V^T buffer.
  bool mma_gemms() {
    const Mma& m = k_.mma;
    for (const auto& g : m.gemms) {
      const std::string what = "GEMM `" + g.tl.text + "`";
      if (!buf(g.b)) return fail(what + " reads B = " + g.b + ", which is not a shared buffer");
      const bool resident = std::find(m.resident_a.begin(), m.resident_a.end(), g.a) != m.resident_a.end();
      switch (g.a_source) {
        case MmaGemm::ASource::Streamed:
          if (!buf(g.a)) return fail(what + " streams A = " + g.a + ", which is not a shared buffer");
          if (resident) return fail(what + " streams " + g.a + ", which the plan keeps in registers");
          break;
        case MmaGemm::ASource::Resident:
          if (!buf(g.a) || !resident) return fail(what + " reads A = " + g.a + " from registers the plan never fills");
          break;
        case MmaGemm::ASource::Register:
          if (buf(g.a)) return fail(what + " reads A = " + g.a + " from registers, but it is a shared buffer");
          break;
      }
      if (!g.b_kmajor && !m.vt_buffer.empty() && (m.vt_buffer != g.b || !buf(g.b + "t")))
        return fail(what + " reads " + g.b + " untransposed without its V^T buffer");
    }
    for (const auto& r : m.resident_a)
      if (std::none_of(m.gemms.begin(), m.gemms.end(), [&](const MmaGemm& g) { return g.a == r && g.a_source == MmaGemm::ASource::Resident; }))
        return fail(r + " is copied to registers but no GEMM reads it from there");
    return true;
  }
  // The cp.async pipeline of the key loop: X and Y are the loop's only copies into shared memory;
  // X(j) is read first, and every read of X comes before the first read of Y (so Y(j) lands while X
  // is read and X(j + 1) while Y is); each is copied before its first read.
  bool mma_pipeline() {
    const Mma& m = k_.mma;
    const MmaPipeline& p = m.pipeline;
    if (!p.pipelined) {
      if (p.why_not.empty()) return fail("the loop's copies are not pipelined and the IR does not say why");
      return true;
    }
    const int n = int(m.loop.size());
    auto in = [&](int i) { return i >= 0 && i < n; };
    if (!in(p.x_copy) || !in(p.y_copy) || !in(p.x_first) || !in(p.x_last) || !in(p.y_first))
      return fail("the pipeline names statements outside the loop");
    if (p.x == p.y || !buf(p.x) || !buf(p.y)) return fail("the pipeline streams " + p.x + " and " + p.y);
    for (const auto& name : {p.x, p.y})
      if (buf(name)->stages != m.stages) return fail(name + " has " + std::to_string(buf(name)->stages) + " buffers for " + std::to_string(m.stages) + " stages");
    int first_shared = -1, x_first = -1, x_last = -1, y_first = -1;
    for (int i = 0; i < n; ++i) {
      const MmaStmt& s = m.loop[size_t(i)];
      if (!s.fills.empty() && !((i == p.x_copy && s.fills == p.x) || (i == p.y_copy && s.fills == p.y)))
        return fail("TL " + std::to_string(s.tl.line) + " copies into " + s.fills + " outside the pipeline");
      if (!s.reads.empty() && first_shared < 0) first_shared = i;
      for (const auto& r : s.reads) {
        if (r == p.x) {
          if (x_first < 0) x_first = i;
          x_last = i;
        }
        if (r == p.y && y_first < 0) y_first = i;
      }
    }
    if (m.loop[size_t(p.x_copy)].fills != p.x || m.loop[size_t(p.y_copy)].fills != p.y)
      return fail("the pipeline's copies are not the loop's copies of " + p.x + " and " + p.y);
    if (p.x_first != x_first || p.x_last != x_last || p.y_first != y_first)
      return fail("the pipeline waits at [" + std::to_string(p.x_first) + ", " + std::to_string(p.x_last) + ", " +
                  std::to_string(p.y_first) + "]; " + p.x + " is first read at [" + std::to_string(x_first) + "], last at [" +
                  std::to_string(x_last) + "], " + p.y + " first at [" + std::to_string(y_first) + "]");
    if (first_shared != x_first) return fail("a shared buffer is read before " + p.x + ", the pipeline's first wait");
    if (!(p.x_copy < x_first && p.y_copy < y_first && x_last < y_first))
      return fail(p.x + " and " + p.y + " are not copied, read and refilled in pipeline order");
    return true;
  }

  // Shared memory fits the target, tiles are 1024-byte aligned (the 128-byte swizzle) and do not
  // overlap, barriers are 8-byte aligned and outside the tiles.
  bool smem() {
    if (k_.launch.smem_bytes > k_.smem_limit)
      return fail("it needs " + std::to_string(k_.launch.smem_bytes) + " bytes of shared memory; the target has " +
                  std::to_string(k_.smem_limit));
    std::vector<std::pair<int64_t, int64_t>> spans;
    int64_t end = 0;
    for (const auto& b : k_.smem) {
      if (b.offset % 1024 != 0) return fail("shared " + b.name + " at offset " + std::to_string(b.offset) + " is not 1024-byte aligned");
      if (b.cols_padded % 64 != 0 || b.cols_padded < b.cols) return fail("shared " + b.name + " is not padded to 64 columns");
      if (!b.alias_of.empty()) {
        const SharedBuf* a = buf(b.alias_of);
        if (!a || a->offset != b.offset || int64_t(b.rows) * b.cols_padded > int64_t(a->rows) * a->cols_padded)
          return fail("shared " + b.name + " does not fit in " + b.alias_of + "'s space");
        continue;
      }
      spans.push_back({b.offset, b.offset + b.bytes});
      end = std::max(end, b.offset + b.bytes);
      if (b.ring && b.name != "O") {
        if (b.barrier_offset % 8 != 0) return fail("the mbarriers of " + b.name + " are not 8-byte aligned");
        spans.push_back({b.barrier_offset, b.barrier_offset + 16 * b.stages});
        end = std::max(end, b.barrier_offset + 16 * b.stages);
      }
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second) return fail("shared buffers overlap at byte " + std::to_string(spans[i].first));
    if (end + hw::sm90::kAlignSlack > k_.launch.smem_bytes) return fail("the shared-memory size leaves no alignment slack");
    return true;
  }

  // One producer warpgroup, 64-row consumer warpgroups, registers within the SM.
  bool roles() {
    const Roles& r = k_.roles;
    if (r.producer_wg != 1) return fail(std::to_string(r.producer_wg) + " producer warpgroups");
    if (r.split_columns ? (r.consumer_wg != 2 || k_.sm90.bm != 64 || r.pingpong)
                        : (r.consumer_wg * 64 != k_.sm90.bm || r.consumer_wg < 1 || r.consumer_wg > 3))
      return fail(std::to_string(r.consumer_wg) + " consumer warpgroups for BM = " + std::to_string(k_.sm90.bm));
    if (k_.launch.threads != 128 * (r.producer_wg + r.consumer_wg)) return fail("threads do not match the roles");
    for (int x : {r.producer_regs, r.consumer_regs})
      if (x < 24 || x > 256 || x % 8 != 0) return fail(std::to_string(x) + " registers per thread is not a setmaxnreg value");
    // setmaxnreg moves the registers the threads got at launch (hw::sm90::launch_registers)
    const int wgs = r.producer_wg + r.consumer_wg;
    const int64_t regs = 128LL * (r.producer_wg * r.producer_regs + r.consumer_wg * r.consumer_regs);
    const int64_t launch = int64_t(hw::sm90::launch_registers(wgs, k_.regs_per_sm)) * 128 * wgs;
    if (regs > launch) return fail("the roles take " + std::to_string(regs) + " registers; the block holds " + std::to_string(launch) + " at launch");
    if (r.pingpong && r.consumer_wg != 2) return fail("ping-pong over " + std::to_string(r.consumer_wg) + " consumer warpgroups");
    return true;
  }

  // Every register an op names is declared, with the kind the op needs.
  bool registers() {
    std::set<std::string> seen;
    for (const auto& r : k_.sm90.regs) {
      if (!seen.insert(r.name).second) return fail("register tensor " + r.name + " declared twice");
      if (r.kind != RegKind::Rows && (r.cols <= 0 || r.cols % 8 != 0)) return fail("register tile " + r.name + " has " + std::to_string(r.cols) + " columns");
    }
    for (const auto* b : blocks())
      for (const auto& o : *b)
        for (const std::string* n : {&o.a, &o.b, &o.result}) {
          if (n->empty() || (o.kind == Op::Kind::GemmSS && n == &o.a) || ((o.kind == Op::Kind::GemmSS || o.kind == Op::Kind::GemmRS) && n == &o.b))
            continue;
          if (o.kind == Op::Kind::RingWait || o.kind == Op::Kind::RingRelease || o.kind == Op::Kind::Stmt) continue;
          if (!reg(*n)) return fail("`" + op_text(o) + "` names " + *n + ", which is not a register tensor");
        }
    return true;
  }

  // wgmma shapes: M = 64 per warpgroup, N = 8..256 in steps of 8, K a multiple of 16; A/B/C shapes
  // agree. The asynchrony: no op touches a register of a GEMM still in flight (its accumulator, its
  // register A operand), no ring slot a GEMM in flight reads is released, a wait never counts more
  // groups than are in flight and fences the registers of the groups it completes, and every block
  // ends with no GEMM in flight.
  bool gemms() {
    struct Flight {
      int group;
      std::set<std::string> hw_reads, hw_writes;
      std::string ring, a_shared;
    };
    for (const auto* b : blocks()) {
      std::vector<Flight> flight;
      for (const auto& o : *b) {
        if (o.kind == Op::Kind::GemmSS || o.kind == Op::Kind::GemmRS) {
          const Reg* c = reg(o.result);
          if (!c || c->kind != RegKind::Tile) return fail("`" + op_text(o) + "` accumulates into something that is not a tile");
          if (!hw::sm90::wgmma_n_ok(c->cols)) return fail("`" + op_text(o) + "`: no wgmma has N = " + std::to_string(c->cols));
          if (backend::wgmma_atom_n(o.atom) != c->cols) return fail("`" + op_text(o) + "`: the atom's N is not the accumulator's");
          const SharedBuf* bb = buf(o.b);
          if (!bb || !bb->ring) return fail("`" + op_text(o) + "`: B is not a ring");
          const int split = k_.roles.split();
          if (o.kind == Op::Kind::GemmSS && o.b_mn) {
            // O += P V: A the staged (BM, BN) P tile, B a view of the ring's first columns, split over the warpgroups
            const SharedBuf* ab = buf(o.a);
            if (!ab || !ab->from_registers || ab->rows != k_.sm90.bm || o.k_dim != ab->cols || o.k_dim % 16 != 0 || bb->rows != o.k_dim ||
                c->cols * split > bb->cols || !k_.roles.split_columns)
              return fail("`" + op_text(o) + "`: the operand shapes do not tile");
          } else if (o.kind == Op::Kind::GemmSS) {
            const SharedBuf* ab = buf(o.a);
            if (!ab || o.a_rows != k_.sm90.bm || o.k_dim % 16 != 0 || o.k_dim != ab->cols_padded || bb->cols_padded != o.k_dim ||
                bb->rows != c->cols * split)
              return fail("`" + op_text(o) + "`: the operand shapes do not tile");
          } else {
            const Reg* a = reg(o.a);
            if (!a || a->kind != RegKind::OperandA || a->cols != bb->rows || bb->rows % 16 != 0 || bb->cols != c->cols)
              return fail("`" + op_text(o) + "`: the operand shapes do not tile");
          }
        }
        if (o.kind == Op::Kind::GemmWait) {
          if (o.pending < 0 || o.pending >= int(flight.size())) return fail("`" + op_text(o) + "` with " + std::to_string(flight.size()) + " GEMMs in flight");
          for (size_t i = 0; i + size_t(o.pending) < flight.size(); ++i)
            for (const auto* set : {&flight[i].hw_reads, &flight[i].hw_writes})
              for (const auto& r : *set)
                if (std::find(o.regs.begin(), o.regs.end(), r) == o.regs.end())
                  return fail("`" + op_text(o) + "` does not fence " + r + " of GEMM #" + std::to_string(flight[i].group) + ", which it completes");
          flight.erase(flight.begin(), flight.end() - o.pending);
          continue;
        }
        if (o.kind == Op::Kind::StoreShared)
          for (const auto& f : flight)
            if (f.a_shared == o.buffer)
              return fail("`" + op_text(o) + "` while GEMM #" + std::to_string(f.group) + " still reads " + o.buffer);
        if (o.kind == Op::Kind::RingRelease) {
          for (const auto& f : flight)
            if (f.ring == o.buffer || f.a_shared == o.buffer)
              return fail("`" + op_text(o) + "` while GEMM #" + std::to_string(f.group) + " still reads the slot (the producer could refill it)");
          continue;
        }
        std::set<std::string> r, w;
        registers_of(o, r, w);
        for (const auto& f : flight) {
          for (const auto& x : w)
            if (f.hw_reads.count(x) || f.hw_writes.count(x))
              return fail("`" + op_text(o) + "` writes " + x + " while GEMM #" + std::to_string(f.group) + " is in flight");
          for (const auto& x : r)
            if (f.hw_writes.count(x))
              return fail("`" + op_text(o) + "` reads " + x + " while GEMM #" + std::to_string(f.group) + " still writes it");
        }
        if (o.kind == Op::Kind::GemmSS || o.kind == Op::Kind::GemmRS) {
          Flight f;
          f.group = o.group;
          f.ring = o.b;
          f.a_shared = o.kind == Op::Kind::GemmSS ? o.a : "";
          f.hw_writes.insert(o.result);
          if (o.kind == Op::Kind::GemmRS) f.hw_reads.insert(o.a);
          flight.push_back(f);
        }
      }
      if (!flight.empty()) return fail("a block ends with GEMM #" + std::to_string(flight.front().group) + " in flight");
    }
    return true;
  }

  // Ping-pong: a block that issues GEMMs takes the turn once before the first and passes it once
  // after the last; without ping-pong (or without GEMMs) a block has no turns.
  bool turns() {
    for (const auto* b : blocks()) {
      int first = -1, last = -1, wait = -1, pass = -1, waits = 0, passes = 0;
      for (int i = 0; i < int(b->size()); ++i) {
        const Op& o = (*b)[size_t(i)];
        if (o.kind == Op::Kind::GemmSS || o.kind == Op::Kind::GemmRS) {
          if (first < 0) first = i;
          last = i;
        }
        if (o.kind == Op::Kind::TurnWait) wait = i, ++waits;
        if (o.kind == Op::Kind::TurnPass) pass = i, ++passes;
      }
      if (!k_.roles.pingpong || first < 0) {
        if (waits || passes) return fail("a block takes a ping-pong turn " + std::string(k_.roles.pingpong ? "without issuing a GEMM" : "in a kernel without ping-pong"));
        continue;
      }
      if (waits == 1 && passes == 0)
        return fail("a block takes the ping-pong turn but never passes it (the other consumer warpgroup waits forever)");
      if (waits != 1 || passes != 1 || wait > first || pass < last)
        return fail("a block's ping-pong turn does not enclose its GEMM issues (one turn wait before the first, one pass after the last)");
    }
    return true;
  }

  // Every op gets register tensors of the kinds it works on.
  bool kinds() {
    auto noun = [](RegKind k) {
      return k == RegKind::Tile ? "a tile" : k == RegKind::Rows ? "a row vector" : "a register A operand";
    };
    for (const auto* b : blocks())
      for (const auto& o : *b) {
        using K = Op::Kind;
        std::vector<std::pair<std::string, RegKind>> want;  // (operand, the kind it must have)
        const Reg* a = reg(o.a);
        switch (o.kind) {
          case K::RowMax: case K::RowSum: want = {{o.a, RegKind::Tile}, {o.result, RegKind::Rows}}; break;
          case K::EwRows: want = {{o.a, RegKind::Tile}, {o.b, RegKind::Rows}, {o.result, RegKind::Tile}}; break;
          case K::Ew: case K::Copy: case K::EwScalar: case K::Map:
            if (a && a->kind == RegKind::OperandA) return fail("`" + op_text(o) + "`: " + o.a + " is a register A operand, not a tile or row vector");
            if (a) want = {{o.result, a->kind}};
            if (a && o.kind == K::Ew) want.push_back({o.b, a->kind});
            break;
          case K::Rescale:
            if (a && a->kind == RegKind::OperandA) return fail("`" + op_text(o) + "`: " + o.a + " is a register A operand, not a tile or row vector");
            want = {{o.b, RegKind::Rows}};
            break;
          case K::Normalize: want = {{o.a, RegKind::Tile}, {o.b, RegKind::Rows}}; break;
          case K::Convert: want = {{o.a, RegKind::Tile}, {o.result, RegKind::OperandA}}; break;
          case K::Mask: case K::Modify: case K::StoreO: want = {{o.a, RegKind::Tile}}; break;
          case K::QuadSum: case K::StoreRows: case K::RowCombine: want = {{o.a, RegKind::Rows}}; break;
          case K::StoreShared: want = {{o.a, RegKind::OperandA}}; break;
          default: break;
        }
        for (const auto& [name, kind] : want) {
          const Reg* r = reg(name);
          if (!r) return fail("`" + op_text(o) + "` names " + (name.empty() ? std::string("no register") : name) + ", which is not a register tensor");
          if (r->kind != kind) return fail("`" + op_text(o) + "` gets " + name + ", which is not " + noun(kind));
        }
      }
    return true;
  }

  // Every wait has a producer and every slot is released before the producer refills it: per key
  // tile the consumer waits for and releases each ring as often as the producer loads it, in that
  // order; a ring loaded once per tile is waited for and released once per tile.
  bool rings() {
    const Sm90& h = k_.sm90;
    std::map<std::string, int> loads_loop, loads_once;
    for (const auto& l : h.loads) {
      const SharedBuf* b = buf(l.buffer);
      if (!b || !b->ring) return fail("a load into " + l.buffer + ", which is not a ring");
      if (l.rows != b->rows || l.cols != b->cols)
        return fail("a load of (" + std::to_string(l.rows) + ", " + std::to_string(l.cols) + ") into " + l.buffer + "'s (" +
                    std::to_string(b->rows) + ", " + std::to_string(b->cols) + ") slots: its byte count would never complete the slot");
      (l.in_loop ? loads_loop : loads_once)[l.buffer]++;
    }
    auto count = [&](const std::vector<Op>& ops, Op::Kind kind, const std::string& ring) {
      return int(std::count_if(ops.begin(), ops.end(), [&](const Op& o) { return o.kind == kind && o.buffer == ring; }));
    };
    for (const auto& b : k_.smem) {
      if (!b.ring || b.name == "O") continue;
      const int loop = loads_loop[b.name], once = loads_once[b.name];
      if (loop && once) return fail(b.name + " is loaded both once per tile and per key tile");
      if (!loop && !once) return fail(b.name + " is never loaded: its waits have no producer");
      for (auto kind : {Op::Kind::RingWait, Op::Kind::RingRelease}) {
        const char* what = kind == Op::Kind::RingWait ? "waited for" : "released";
        if (loop) {
          const int steady = count(h.loop.steady, kind, b.name);
          const int split = count(h.loop.first, kind, b.name) + count(h.loop.drain, kind, b.name);
          if (steady != loop || (h.loop.overlap && split != loop))
            return fail(b.name + " is loaded " + std::to_string(loop) + " time(s) per key tile but " + what + " " + std::to_string(steady) + " time(s)");
          if (count(h.before, kind, b.name) + count(h.released_after_loop, kind, b.name) + count(h.after, kind, b.name))
            return fail(b.name + " is " + what + " outside the key loop");
        } else {
          int n = 0;
          for (const auto* blk : blocks()) n += count(*blk, kind, b.name);
          const bool outside = count(h.before, kind, b.name) + count(h.released_after_loop, kind, b.name) + count(h.after, kind, b.name) == n;
          if (n != once || !outside)
            return fail(b.name + " is loaded once per tile but " + what + " " + std::to_string(n) + " time(s)" + (outside ? "" : " (in the key loop)"));
        }
      }
      // wait before release, alternating, in every block; a ring a view reads in a pipelined loop
      // (split columns) is waited for in stage 0 and released in stage 1: held from the first block
      // into the drain, one key tile at a time (the emitter's second position, posXr, follows it)
      bool viewed = false;
      for (const auto& v : k_.smem) viewed = viewed || v.view_of == b.name;
      const bool across = viewed && h.loop.overlap;
      for (const auto* blk : {&h.loop.first, &h.loop.steady, &h.loop.drain}) {
        int held = across && blk != &h.loop.first ? 1 : 0;
        const int start = held;
        for (const auto& o : *blk) {
          if (o.buffer != b.name) continue;
          if (o.kind == Op::Kind::RingWait && ++held > 1 + start) return fail(b.name + " is waited for twice before a release");
          if (o.kind == Op::Kind::RingRelease && --held < 0) return fail(b.name + " is released before it is waited for");
        }
        const int end = across && blk != &h.loop.drain ? 1 : 0;
        if (held != end) return fail(b.name + " is still held at the end of a block: the producer would wait forever");
      }
    }
    // GEMM operands from a ring are read between its wait and its release
    for (const auto* blk : {&h.loop.first, &h.loop.steady, &h.loop.drain}) {
      std::map<std::string, bool> held;
      for (const auto& w : h.before)
        if (w.kind == Op::Kind::RingWait) held[w.buffer] = true;
      if (h.loop.overlap && blk != &h.loop.first)  // a ring a view reads: held across the blocks (above)
        for (const auto& v : k_.smem)
          if (!v.view_of.empty()) held[v.view_of] = true;
      for (const auto& o : *blk) {
        if (o.kind == Op::Kind::RingWait) held[o.buffer] = true;
        if (o.kind == Op::Kind::RingRelease) held[o.buffer] = false;
        if (o.kind == Op::Kind::GemmSS && !o.b_mn && !held[o.a]) return fail("`" + op_text(o) + "` reads " + o.a + " without a wait");
        if ((o.kind == Op::Kind::GemmSS || o.kind == Op::Kind::GemmRS) && !held[o.b])
          return fail("`" + op_text(o) + "` reads " + o.b + " without a wait");
      }
    }
    return true;
  }

  bool stores() {
    for (const auto* b : blocks())
      if (b != &k_.sm90.after)
        for (const auto& op : *b)
          if (op.kind == Op::Kind::StoreO || op.kind == Op::Kind::StoreRows) {
            std::string what = op_text(op);
            return fail("`" + what + "` outside the statements after the key loop");
          }
    int o = 0, lse = 0;
    for (const auto& op : k_.sm90.after) {
      o += op.kind == Op::Kind::StoreO;
      lse += op.kind == Op::Kind::StoreRows;
    }
    if (o != 1) return fail("O is stored " + std::to_string(o) + " times");
    if (lse != (k_.lse ? 1 : 0)) return fail("LSE is stored " + std::to_string(lse) + " times");
    return true;
  }

  const Kernel& k_;
  support::DiagSink& d_;
};

}  // namespace

bool verify(const Kernel& k, support::DiagSink& diags) { return Verifier(k, diags).run(); }

}  // namespace qattn::backend::kir
