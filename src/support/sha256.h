// SHA-256 (FIPS 180-4), for content-addressed caches. Written here; no dependency.
#pragma once
#include <string>
#include <string_view>

namespace qattn::support {

// Lower-case hex digest of `data`.
std::string sha256_hex(std::string_view data);

}  // namespace qattn::support
