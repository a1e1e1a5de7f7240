// flock(2) on <dir>/.lock: released by the kernel when the holder's descriptor closes, the
// process included, so no job ever has to clean up after a killed one.
#include "io/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "io/checkpoint_dir.h"
#include "mesh/mpi_check.h"
#include "mesh/agree.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// flock locks belong to open file descriptions: a second open in this process would conflict
// with the first, so this process remembers which directories it holds.
std::mutex held_mutex;
std::set<std::string>& held() {
  static std::set<std::string> dirs;
  return dirs;
}

std::string canonical_key(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  return ec ? dir : p.string();
}

std::string read_holder(int fd) {
  char buffer[256] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string text = n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : std::string();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text.empty() ? "an unknown holder" : text;
}

}  // namespace

std::unique_ptr<DirectoryLock> DirectoryLock::acquire(const std::string& dir) {
  checkpoint_dir::make_directories(dir);
  const std::string path = (fs::path(dir) / file_name).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw IoError("checkpoint directory '" + dir + "': cannot open the lock file '" + path + "': " + std::strerror(errno));
  }
  // O_RDWR opens a FIFO without waiting; one planted there is named, not locked and truncated.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError("checkpoint directory '" + dir + "': the lock file '" + path + "' is " + file_kind(path) +
                  ", not a regular file");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? read_holder(fd) : std::string();
    ::close(fd);
    if (error == EWOULDBLOCK) {
      throw IoError("checkpoint directory '" + dir + "' is in use by another job (lock '" + path + "' held by " +
                    holder + ")");
    }
    throw IoError("checkpoint directory '" + dir + "': cannot lock '" + path + "': " + std::strerror(error));
  }
  // Ours now (a stale file of a killed job included): say who holds it.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string holder = "host " + std::string(host) + " pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    const std::string error = std::strerror(errno);
    ::close(fd);
    throw IoError("checkpoint directory '" + dir + "': cannot write the lock file '" + path + "': " + error);
  }
  std::string key = canonical_key(dir);
  std::lock_guard guard(held_mutex);
  held().insert(key);
  return std::unique_ptr<DirectoryLock>(new DirectoryLock(fd, std::move(key)));
}

bool DirectoryLock::held_here(const std::string& dir) {
  const std::string key = canonical_key(dir);
  std::lock_guard guard(held_mutex);
  return held().count(key) != 0;
}

DirectoryLock::~DirectoryLock() {
  // A job never releases its directory while this process still removes old checkpoints in it.
  checkpoint_dir::wait_for_removals();
  {
    std::lock_guard guard(held_mutex);
    held().erase(key_);
  }
  // The file stays (removing it would race with a job opening it); closing drops the lock.
  ::close(fd_);
}

std::optional<std::string> broadcast_root_message(const Communicator& comm, const std::optional<std::string>& message) {
  // "1<message>" or "0" for none.
  const std::string coded = broadcast_string(comm, comm.rank() == 0 && message ? "1" + *message : "0", 0);
  if (coded[0] == '0') return std::nullopt;
  return coded.substr(1);
}

std::unique_ptr<DirectoryLock> lock_checkpoint_directory(const Communicator& comm, const std::string& dir) {
  std::unique_ptr<DirectoryLock> lock;
  std::optional<std::string> error;
  if (comm.rank() == 0) {
    try {
      lock = DirectoryLock::acquire(dir);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  if (auto message = broadcast_root_message(comm, error)) throw IoError(*message);
  return lock;
}

}  // namespace tessera
