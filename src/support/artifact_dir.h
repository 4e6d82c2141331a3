// Artifact folders (`qattn generate`, `qattn plan`, `qattn sketch --out`) written whole.
//
// ArtifactDir::commit writes every file of a run into a temporary sibling folder (".<out>.tmp-N")
// and then puts that folder in the place of `out` in one rename (an atomic exchange where the file
// system offers renameat2), so the files of an earlier run with the same --out never mix with the
// new ones: afterwards `out` holds exactly the staged files and the marker file. On any failure
// the temporary folder is removed and `out` is left as it was. A temporary sibling that a killed
// run left (older than kStaleTemporaryAge) is removed by the next commit into the same --out.
//
// check_out_folder decides whether `out` may be replaced at all (codes OUT0101-OUT0103, each with
// a hint; docs/architecture.md, "Artifact folders"):
//   OUT0101  a system folder: /, /usr, /etc, /bin, /proc, /sys, /dev (and the other top-level
//            system folders), $HOME itself, the current folder's file-system root
//   OUT0102  it exists and is not a folder
//   OUT0103  an existing, non-empty folder that qattn did not write: it holds neither the marker
//            (kArtifactMarker) nor only the names of qattn artifacts
// OUT0104 is a failure to write or move the folder (with the OS reason).
#pragma once
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "support/diag.h"

namespace qattn::support {

// The file that marks a folder as written by qattn (and so replaceable by the next run).
inline constexpr const char* kArtifactMarker = ".qattn-artifacts";

// A temporary sibling older than this was left by a run that died while writing; the next commit
// into the same --out removes it.
inline constexpr std::chrono::minutes kStaleTemporaryAge{10};
void remove_stale_temporaries(const std::filesystem::path& dest);

// Whether `out` may be (re)written as an artifacts folder; reports OUT0101-OUT0103 when not.
bool check_out_folder(const std::filesystem::path& out, DiagSink& diags);

class ArtifactDir {
 public:
  // `name`: a path relative to the folder ("code.tl", "llm/summary.json").
  void stage(std::filesystem::path name, std::string content);
  // check_out_folder(out), then writes the staged files (and the marker) as the whole of `out`.
  bool commit(const std::filesystem::path& out, DiagSink& diags) const;
  const std::vector<std::filesystem::path>& names() const { return names_; }

 private:
  std::vector<std::filesystem::path> names_;
  std::vector<std::string> contents_;
};

}  // namespace qattn::support
