// The TL abstract syntax tree. One Program per file; statements in source order, loop bodies
// nested. Value semantics throughout (copyable), so passes can rewrite programs freely.
// The grammar and the meaning of every node are in docs/tl.md.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "qattn/kinds.h"
#include "support/diag.h"

namespace qattn::tl {

using support::SrcLoc;

// ---- expressions ---------------------------------------------------------------------------
// Integer index/dimension expressions and scalar float expressions share one tree.
struct Expr {
  enum class Kind {
    Number,  // literal: value (integral literals have is_int = true)
    Name,    // identifier: name (dim, const, grid/loop/let variable, builtin scalar, tensor)
    Unary,   // op = "-" or "not" ; args[0]
    Binary,  // op in + - * / % ; args[0], args[1]   ('/' on integers is floor division)
             // and, in Score/Mask declarations only: < <= > >= == != and or
    Call,    // name in cdiv, min, max (and, in declarations: tanh exp exp2 log abs clamp floor)
    Index,   // name[args]: an element of an auxiliary global tensor (declarations only)
  };
  Kind kind = Kind::Number;
  double value = 0;
  bool is_int = true;
  std::string name;  // Name / Call
  std::string op;    // Unary / Binary
  std::vector<Expr> args;
  SrcLoc loc;

  static Expr number(double v, bool is_int, SrcLoc l = {});
  static Expr ident(std::string n, SrcLoc l = {});
  static Expr unary(std::string op, Expr a, SrcLoc l = {});
  static Expr binary(std::string op, Expr a, Expr b, SrcLoc l = {});
  static Expr call(std::string fn, std::vector<Expr> args, SrcLoc l = {});
  static Expr index(std::string tensor, std::vector<Expr> idx, SrcLoc l = {});
};

bool operator==(const Expr& a, const Expr& b);  // structural, ignores locations
inline bool operator!=(const Expr& a, const Expr& b) { return !(a == b); }

// ---- enums ---------------------------------------------------------------------------------
enum class Space { Global, Shared, Register };
using DType = qattn::DType;  // include/qattn/kinds.h; I32: auxiliary tensors only

const char* to_string(Space s);  // "global", "shared", "register"
using qattn::to_string;          // DType: "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int32";
                                 // MaskSpec::Kind: "none", "bounds", "causal", "causal_top_left", "window", "named"
std::optional<Space> parse_space(const std::string& s);
std::optional<DType> parse_dtype(const std::string& s);

// A mask as written after `with` in `Kernel ... with mask M` and `Compute Mask S at [..] with M`.
struct MaskSpec {
  using Kind = qattn::MaskKind;  // include/qattn/kinds.h
  Kind kind = Kind::None;
  Expr left, right;  // Window only: keys in [i+off-left, i+off+right], off = seqlen_k - seqlen_q
  std::string name;  // Named only (Compute statements): a `Mask NAME = ...` or `Score NAME = ...` declaration
  SrcLoc loc;
};

// Schedule attributes in braces after a statement: `{async}`, `{stages: 2}`, `{wait: K, release: K}`.
// Parsed and printed for every statement (keys may repeat, in order); the checker says which are
// understood where: `skip: MASK` (loops), and the Hopper schedule's `stages: N` (shared Allocate),
// `async` (global -> shared Copy), `wait: X` / `release: X` (any statement), `overlap` (the key
// loop). See docs/tl.md, "Schedule attributes" and "Hopper schedule".
struct Attr {
  std::string key;
  std::optional<Expr> value;  // `async` has none; `stages: 2` has one
  SrcLoc loc;
};

// A GEMM / arithmetic operand: a tensor name or a scalar expression, optionally transposed (^T).
struct Operand {
  Expr expr;
  bool transposed = false;
  SrcLoc loc;
};

// ---- statements ----------------------------------------------------------------------------
struct Stmt;

struct KernelStmt {  // Kernel NAME [backward | combine] [with mask M]
  std::string name;
  MaskSpec mask;
  // `backward`: the program computes the gradients dQ, dK, dV of the attention the rest of the line
  // declares, from Q, K, V, O, dO and LSE (docs/tl.md, "The backward pass").
  bool backward = false;
  // `combine`: the program merges the partial results (O_part, LSE_part) of `splits` disjoint key
  // sets of the same queries into O and LSE (docs/tl.md, "Combining partial results").
  bool combine = false;
};
struct DimStmt {  // Dim a, b = 128, c      (problem dimensions; optionally fixed)
  struct Item { std::string name; std::optional<Expr> value; SrcLoc loc; };
  std::vector<Item> items;
};
struct ConstStmt {  // Const BM = 128, BN = 64  (tile parameters, compile-time)
  struct Item { std::string name; Expr value; SrcLoc loc; };
  std::vector<Item> items;
};
struct GridStmt {  // Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch
  struct Item { std::string var; Expr extent; SrcLoc loc; };
  std::vector<Item> items;
};
struct LetStmt {  // Let kv_head = head / (heads_q / heads_kv)
  std::string name;
  Expr value;
};
struct AllocateStmt {
  // Allocate NAME in SPACE (shape) [DTYPE] [with offset [e, ...]] [init VALUE]
  std::string name;
  Space space = Space::Register;
  std::vector<Expr> shape;
  std::optional<DType> dtype;        // printed always by the printer (defaults in docs/tl.md)
  std::vector<Expr> offset;          // global only: indices of the leading (batch, head) dims
  std::optional<Expr> init;          // register only
};
struct CopyStmt {
  // Copy NAME [(tile shape) in coordinate [c, ...]] from SPACE to SPACE
  std::string name;
  std::vector<Expr> tile;    // empty: the whole buffer
  std::vector<Expr> coord;   // tile coordinate, in units of the tile shape
  Space from = Space::Global;
  Space to = Space::Shared;
  // `... from register to global and accumulate`: the tile is added to the global tensor's values
  // (fp32 outputs of a backward program, zero at launch: dQ, and dK / dV under GQA).
  bool accumulate = false;
};
struct ComputeStmt {
  // Compute OP operands [and get NAME | and accumulate NAME] [at [r, c]] [with MASK]
  std::string op;  // canonical spelling: GEMM Add Subtract Multiply Divide Max Exp Exp2 Log Log2
                   // Convert RowMax RowSum Rescale Normalize Mask Modify
  std::vector<Operand> operands;
  enum class Result { InPlace, Get, Accumulate };
  Result result = Result::InPlace;
  std::string target;         // for Get / Accumulate
  SrcLoc target_loc;
  std::optional<DType> target_dtype;  // Get only: `and get P16 fp16` (none: fp32, the default)
  std::vector<Expr> at;       // Mask / Modify only: tile coordinate of the score tile
  MaskSpec mask;              // Mask / Modify only (Modify: always Named)
};
// Score NAME = expr
// Mask NAME = predicate [empty when predicate] [full when predicate]
// A score modification (`score`, `q_idx`, `kv_idx` in scope) or a mask (`q_idx`, `kv_idx`; its
// tile clauses see `q_lo`, `q_hi`, `kv_lo`, `kv_hi`), applied by `Compute Modify|Mask S at [r, c]
// with NAME`. Clauses are promises about a whole tile pair; see docs/tl.md.
struct VariantStmt {
  bool is_mask = false;
  std::string name;
  Expr expr;
  std::optional<Expr> empty_when, full_when;
  bool derived = false;  // the clauses were derived by the front end (not printed)
};
struct ReshapeStmt {
  // Reshape NAME from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)
  std::string name;
  std::vector<std::string> from, to;  // layout tuples as written
};
// for VAR = LO: HI  ... end
// Phase NAME ... end (a backward program's kernel that runs before the main one over its own Grid,
// e.g. D = rowsum(dO * O): docs/tl.md, "Phases"): stored as a ForStmt with var = NAME, no bounds.
// Merge AXIS ... end (a forward program that splits the keys over the Grid axis AXIS: the block that
// stores the last part of a tile merges every part, a combine program's body: docs/tl.md, "Merging
// the parts in the kernel"): stored as a ForStmt with var = AXIS, no bounds.
struct ForStmt {
  std::string var;
  Expr lo, hi;
  std::vector<Stmt> body;
  SrcLoc end_loc;
  std::string end_comment;    // trailing `# ...` on the `end` line, without '#'
};
// Role producer warpgroups 1 registers 24
// Role consumer warpgroups 2 registers 240 pingpong
// Hopper (sm90) warp specialisation: the block's warps are split into warpgroups of 4 warps; the
// producer warpgroup(s) issue the asynchronous copies (`{async}`), the consumer warpgroups do
// everything else (each owns BM / warpgroups rows of the query tile). `registers` is the per-thread
// register count the role runs with after reallocation (setmaxnreg); `pingpong` (consumer only):
// two consumer warpgroups alternate so that one's softmax runs under the other's GEMMs.
// `split columns` (consumer only, at least 2 warpgroups, not with pingpong): the N consumer
// warpgroups share every row of the query tile instead; warpgroup w computes the score tile's key
// columns [w BN / N, (w + 1) BN / N) and the output's columns [w d_v / N, (w + 1) d_v / N), the row
// statistics are combined through shared memory, and the P tile the second GEMM reads is staged in
// shared memory by the program (`Copy Pc from register to shared`). A schedule fact: the values do
// not change. See docs/tl.md, "Hopper schedule".
struct RoleStmt {
  bool producer = false;  // true: `Role producer`, false: `Role consumer`
  Expr warpgroups;        // a compile-time integer >= 1
  Expr registers;         // a compile-time integer in [24, 256], a multiple of 8
  bool pingpong = false;
  bool split_columns = false;  // `split columns`
};
struct CommentStmt {  // a whole-line comment, text without the leading '#'
  std::string text;
};
struct BlankStmt {};  // one or more blank lines (kept for readable printing)

struct Stmt {
  enum class Kind { Kernel, Dim, Const, Grid, Let, Allocate, Copy, Compute, Reshape, For, Comment, Blank, Variant, Role, Phase, Merge };
  Kind kind = Kind::Blank;
  SrcLoc loc;                     // location of the statement's first token
  std::vector<Attr> attrs;        // schedule attributes `{...}`
  std::string trailing_comment;   // `# ...` after the statement, without '#'
  // Exactly one of these is meaningful, chosen by kind (kept as plain members for simplicity).
  KernelStmt kernel;
  DimStmt dim;
  ConstStmt cnst;
  GridStmt grid;
  LetStmt let;
  AllocateStmt alloc;
  CopyStmt copy;
  ComputeStmt compute;
  ReshapeStmt reshape;
  ForStmt loop;                   // For, Phase (loop.var = its name) and Merge (loop.var = its axis)
  CommentStmt comment;
  VariantStmt variant;
  RoleStmt role;
};

struct Program {
  std::string file;
  std::vector<Stmt> stmts;
};

// Whether any expression of the program (loop bodies included) names `name` as a value (not as a
// declaration name after `with`): e.g. the launch-time builtins a kernel must bind.
bool reads_name(const Program& p, const std::string& name);
bool expr_reads(const Expr& e, const std::string& name);  // e names `name` (a Dim, a variable)

}  // namespace qattn::tl
