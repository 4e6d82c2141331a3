// In-place file edits (support/edit_file.h).
#include "support/edit_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace qattn::support {
namespace fs = std::filesystem;

std::optional<fs::path> editable_file(const fs::path& path, DiagSink& diags) {
  std::error_code ec;
  fs::path target = fs::canonical(path, ec);  // every symlink resolved; fails when missing
  if (ec) {
    diags.error("IO0004", {}, "cannot edit '" + path.string() + "' in place: " + ec.message(),
                "pass an existing regular file");
    return std::nullopt;
  }
  auto st = fs::status(target, ec);
  if (ec || !fs::is_regular_file(st)) {
    diags.error("IO0004", {}, "cannot edit '" + path.string() + "' in place: " +
                (target == path ? std::string("it") : "'" + target.string() + "'") + " is not a regular file",
                "in-place edits change regular files only; print the result instead (leave out -i)");
    return std::nullopt;
  }
  return target;
}

bool rewrite_file(const fs::path& path, const std::string& content, DiagSink& diags) {
  auto target = editable_file(path, diags);
  if (!target) return false;
  struct stat st{};
  if (::stat(target->c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    diags.error("IO0004", {}, "cannot edit '" + path.string() + "' in place: " + std::strerror(errno),
                "pass an existing regular file");
    return false;
  }
  auto fail = [&](const std::string& what, const fs::path& tmp) {
    diags.error("IO0002", {}, "cannot write '" + target->string() + "': " + what + ": " + std::strerror(errno),
                "check that the file's folder is writable");
    if (!tmp.empty()) ::unlink(tmp.c_str());
    return false;
  };
  // The temporary: in the target's folder (the rename stays on one file system), created
  // exclusively, never readable by others while it is written.
  static std::mt19937_64 rng{std::random_device{}()};
  fs::path tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = target->parent_path() / ("." + target->filename().string() + ".tmp" + std::to_string(rng() % 1000000007));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return fail("cannot create a temporary file beside it", {});
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      return fail("write failed", tmp);
    }
    done += size_t(n);
  }
  // Owner first (fchown clears set-user-ID bits), then the mode.
  if ((st.st_uid != ::geteuid() || st.st_gid != ::getegid()) && ::fchown(fd, st.st_uid, st.st_gid) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return fail("cannot give the new content the file's owner", tmp);
  }
  if (::fchmod(fd, st.st_mode & 07777) != 0 || ::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return fail("cannot give the new content the file's mode", tmp);
  }
  if (::close(fd) != 0) return fail("close failed", tmp);
  if (::rename(tmp.c_str(), target->c_str()) != 0) return fail("rename failed", tmp);
  return true;
}

}  // namespace qattn::support
