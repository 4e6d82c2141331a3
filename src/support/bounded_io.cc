// Size-capped reads and in-place file edits (support/bounded_io.h).
#include "support/bounded_io.h"
#include "support/io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace qattn::support {
namespace fs = std::filesystem;

std::string size_str(size_t bytes) {
  if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

std::optional<std::string> read_file_capped(const fs::path& path, size_t max_bytes, const std::string& what,
                                            DiagSink& diags) {
  auto opened = open_input(path, diags);
  if (!opened) return std::nullopt;
  std::ifstream& in = *opened;
  std::string out;
  char buf[1 << 16];
  while (in && out.size() <= max_bytes) {
    in.read(buf, std::streamsize(std::min(sizeof buf, max_bytes + 1 - out.size())));
    out.append(buf, size_t(in.gcount()));
    if (in.gcount() == 0) break;
  }
  if (out.size() > max_bytes) {
    diags.error("IO0003", {}, "'" + path.string() + "' is larger than " + size_str(max_bytes) + ", the limit of " + what,
                "qattn refuses larger inputs; check that this is the file you meant");
    return std::nullopt;
  }
  return out;
}

}  // namespace qattn::support
