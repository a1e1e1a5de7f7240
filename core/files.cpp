// Opening files by name without waiting on a FIFO (core/files.h).
#include "core/files.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

namespace tessera {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a file of another kind";
}

// Clears O_NONBLOCK on `fd` (set only so that its open would not wait); false on failure.
bool clear_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
}

// Closes `fd` and returns -1 with `why` set: the opens' way out once they hold a descriptor.
// `text` is built by the caller, so an errno it quotes is read before close(2) can change it.
int refuse(int fd, std::string& why, std::string text) {
  ::close(fd);
  why = std::move(text);
  return -1;
}

}  // namespace

std::string file_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "nothing";
  return kind_of(st.st_mode);
}

int open_regular_for_reading(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    why = errno == ENOENT ? std::string("does not exist") : "cannot be opened: " + std::string(std::strerror(errno));
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return refuse(fd, why, "cannot be opened: " + std::string(std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return refuse(fd, why, "is " + kind_of(st.st_mode) + ", not a regular file");
  if (!clear_nonblocking(fd)) return refuse(fd, why, "cannot be opened: " + std::string(std::strerror(errno)));
  return fd;
}

std::string regular_file_problem(const std::string& path) {
  std::string why;
  const int fd = open_regular_for_reading(path, why);
  if (fd >= 0) ::close(fd);
  return why;
}

int open_for_writing(const std::string& path, bool append, std::string& why) {
  // O_TRUNC only once the file is known to be regular: a FIFO or a device is not truncated.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : 0), 0644);
  if (fd < 0) {
    const int error = errno;
    why = error == ENXIO && file_kind(path) == "a FIFO"
              ? std::string("is a FIFO that no process reads")
              : "cannot be opened for writing: " + std::string(std::strerror(error));
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return refuse(fd, why, "cannot be opened for writing: " + std::string(std::strerror(errno)));
  }
  if (S_ISBLK(st.st_mode)) return refuse(fd, why, "is a block device");
  if ((S_ISREG(st.st_mode) && !append && ::ftruncate(fd, 0) != 0) || !clear_nonblocking(fd)) {
    return refuse(fd, why, "cannot be opened for writing: " + std::string(std::strerror(errno)));
  }
  return fd;
}

bool write_all(int fd, const std::string& text, std::string& why) {
  // SIGPIPE blocked on this thread for the writes, and one it raised taken back, so that a pipe
  // or FIFO whose reader went away fails with EPIPE instead of ending the process (unless one
  // was pending already, which stays for whoever raised it).
  sigset_t pipe_signal, before, pending;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  sigemptyset(&pending);
  ::sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &before);
  std::size_t done = 0;
  bool ok = true;
  while (done < text.size()) {
    const ssize_t wrote = ::write(fd, text.data() + done, text.size() - done);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      why = std::strerror(error);
      if (error == EPIPE && !was_pending) {
        const timespec now{0, 0};
        while (::sigtimedwait(&pipe_signal, nullptr, &now) < 0 && errno == EINTR) {
        }
      }
      ok = false;
      break;
    }
    done += static_cast<std::size_t>(wrote);
  }
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return ok;
}

}  // namespace tessera
