// In-place edits of a user's file that change nothing but its content (`qattn tl fmt -i`).
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include "support/diag.h"

namespace qattn::support {

// The regular file that an in-place edit of `path` changes: `path` with every symlink resolved.
// Anything else (missing, a device, a FIFO, a socket, a folder): IO0004, nullopt.
std::optional<std::filesystem::path> editable_file(const std::filesystem::path& path, DiagSink& diags);

// Replaces the content of the regular file `path` (through symlinks: their target is edited and
// the links stay) keeping its mode and owner: writes a temporary file in the target's folder with
// the target's mode and owner, then renames it over the target. IO0004 as editable_file, IO0002
// when writing fails; on failure the file is unchanged and no temporary is left.
bool rewrite_file(const std::filesystem::path& path, const std::string& content, DiagSink& diags);

}  // namespace qattn::support
