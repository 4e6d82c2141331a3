// Inputs that may be hostile (issue 18): size caps for what qattn reads (TL, spec JSON, LLM
// replies), so that no input makes qattn hold memory out of proportion.
#pragma once
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "support/diag.h"

namespace qattn::support {

inline constexpr size_t kMaxTlBytes = size_t(1) << 20;     // a TL program (file or LLM answer)
inline constexpr size_t kMaxSpecBytes = size_t(1) << 20;   // a spec JSON file
inline constexpr size_t kMaxReplyBytes = size_t(4) << 20;  // one LLM reply

// "1 MiB", "4 MiB", "512 KiB", "100 bytes".
std::string size_str(size_t bytes);

// Reads the file at path, at most max_bytes of it (whatever it is: a file, a FIFO, a device; the
// reading stops one byte past the cap). Larger: IO0003 naming `what` and the cap, nullopt.
// Otherwise as read_file (IO0001 when it cannot be opened or is a directory).
std::optional<std::string> read_file_capped(const std::filesystem::path& path, size_t max_bytes,
                                            const std::string& what, DiagSink& diags);

}  // namespace qattn::support
