// Two-phase commit of checkpoint files with POSIX rename, which is atomic within a directory:
// a reader sees either no ckpt_<step>.h5 or the complete file, never a partial one.
#include "io/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <thread>

#include <mpi.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/checkpoint_format.h"

namespace tessera::checkpoint_dir {

namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

constexpr std::string_view prefix = "ckpt_";
constexpr std::string_view extension = ".h5";

// The paths, sorted, of `dir`'s entries named as a checkpoint's files: ckpt_<step>.h5, `latest`
// and the temporary of each (with `temporaries_only`, the temporaries alone). `ec` says whether
// the listing failed.
std::vector<std::string> checkpoint_entries(const std::string& dir, bool temporaries_only, std::error_code& ec) {
  std::vector<std::string> out;
  // Collected first: removing entries while iterating a directory is unspecified.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    const bool temporary = name.ends_with(temporary_suffix);
    if (temporaries_only && !temporary) continue;
    if (temporary) name.resize(name.size() - std::strlen(temporary_suffix));
    if (parse_file_name(name) || name == latest_name) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The first of `paths` that is a directory (where a checkpoint's file goes, unlink and rename
// fail), or empty.
std::string first_directory(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return path;
  }
  return {};
}

}  // namespace

std::string file_name(std::int64_t step) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "ckpt_%08lld.h5", static_cast<long long>(step));
  return buffer;
}

std::optional<std::int64_t> parse_file_name(std::string_view name) {
  if (name.size() <= prefix.size() + extension.size() || !name.starts_with(prefix) || !name.ends_with(extension)) {
    return std::nullopt;
  }
  std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - extension.size());
  if (digits.size() < 8) return std::nullopt;
  std::int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    // A name of more digits than a step has is not a checkpoint of this format.
    if (__builtin_mul_overflow(step, 10, &step) || __builtin_add_overflow(step, c - '0', &step)) return std::nullopt;
  }
  return step;
}

void check_room_for_saves(const std::string& dir) {
  const std::string longest = (fs::path(dir) / (file_name(INT64_MAX) + temporary_suffix)).string();
  if (longest.size() >= PATH_MAX) {
    throw IoError("checkpoint directory '" + dir + "': its path of " + std::to_string(dir.size()) +
                  " bytes leaves no room for its files' names (with '" + file_name(INT64_MAX) + temporary_suffix +
                  "' it passes PATH_MAX, " + std::to_string(PATH_MAX) + " bytes)");
  }
  std::error_code ec;
  if (const std::string obstacle = first_directory(checkpoint_entries(dir, false, ec)); !obstacle.empty()) {
    throw IoError("checkpoint directory '" + dir + "': '" + obstacle +
                  "' is a directory where a checkpoint's file goes, so a save would fail there");
  }
  // A save makes its file and `latest` beside it and renames them: it needs to write the directory
  // (a lock file this user may open can sit in a directory it may not write).
  if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    const int error = errno;
    if (error != ENOENT) {
      throw IoError("checkpoint directory '" + dir + "': this user cannot create files in it (" +
                    std::strerror(error) + "), so a save would fail there");
    }
  }
}

std::optional<std::uint64_t> free_bytes(const std::string& dir) {
  struct statvfs fs_info {};
  if (::statvfs(dir.c_str(), &fs_info) != 0 || fs_info.f_blocks == 0) return std::nullopt;
  std::uint64_t free = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(fs_info.f_bavail), static_cast<std::uint64_t>(fs_info.f_frsize),
                             &free)) {
    return std::nullopt;
  }
  return free;
}

void check_free_space(const std::string& dir, std::uint64_t bytes, std::int64_t step) {
  // A file system that does not say (statvfs fails, or reports no blocks) is not judged.
  const std::optional<std::uint64_t> known = free_bytes(dir);
  if (!known) return;
  const std::uint64_t free = *known;
  if (free < bytes) {
    throw IoError("checkpoint directory '" + dir + "': not enough free space for the checkpoint of step " +
                  std::to_string(step) + ": it needs " + std::to_string(bytes) + " bytes, " + std::to_string(free) +
                  " are free");
  }
}

void make_directories(const std::string& dir) {
  std::error_code ec;
  // A symlink whose target is missing: create_directories says only "File exists" (until the
  // forty-fifth session that was the message).
  if (fs::is_symlink(fs::symlink_status(dir, ec)) && !fs::exists(dir, ec)) {
    throw IoError("checkpoint directory '" + dir + "' is a symlink to '" + fs::read_symlink(dir, ec).string() +
                  "', which does not exist");
  }
  fs::create_directories(dir, ec);
  if (ec) throw IoError("checkpoint directory '" + dir + "': cannot create: " + ec.message());
  if (!fs::is_directory(dir, ec)) throw IoError("checkpoint directory '" + dir + "': not a directory");
}

std::vector<std::pair<std::int64_t, std::string>> list_complete(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    auto step = parse_file_name(it->path().filename().string());
    if (step && it->is_regular_file(ec)) out.emplace_back(*step, it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void sync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw IoError("file '" + path + "': cannot open for fsync: " + errno_text());
  int rc = ::fsync(fd);
  std::string error = rc != 0 ? errno_text() : std::string();
  ::close(fd);
  if (rc != 0) throw IoError("file '" + path + "': fsync failed: " + error);
}

void sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw IoError("checkpoint directory '" + dir + "': cannot open for fsync: " + errno_text());
  int rc = ::fsync(fd);
  std::string error = rc != 0 ? errno_text() : std::string();
  ::close(fd);
  if (rc != 0) throw IoError("checkpoint directory '" + dir + "': fsync failed: " + error);
}

void commit(const std::string& temporary, const std::string& final_path) {
  const std::string dir = fs::path(final_path).parent_path().string();
  sync_file(temporary);
  if (std::rename(temporary.c_str(), final_path.c_str()) != 0) {
    throw IoError("file '" + temporary + "': cannot rename to '" + final_path + "': " + errno_text());
  }
  sync_directory(dir);
  // The pointer is a convenience for people and tools; the rename above is the commit point, and
  // the checkpoint is the directory's newest whatever the pointer says (latest_checkpoint reads
  // the names). So a pointer that cannot be written (a full disk, no inodes left) is a warning and
  // the save goes on to prune: until the forty-fifth session it failed the save of a committed
  // checkpoint, and the pruning that would have freed space never ran.
  const std::string pointer = (fs::path(dir) / latest_name).string();
  const std::string pointer_temporary = pointer + temporary_suffix;
  try {
    {
      const int fd = create_exclusive(pointer_temporary);
      const std::string line = fs::path(final_path).filename().string() + "\n";
      const ssize_t written = ::write(fd, line.data(), line.size());
      const std::string error = written < 0 ? errno_text() : std::string("short write");
      ::close(fd);
      if (written != static_cast<ssize_t>(line.size())) {
        throw IoError("file '" + pointer_temporary + "': cannot write the latest pointer: " + error);
      }
    }
    sync_file(pointer_temporary);
    if (std::rename(pointer_temporary.c_str(), pointer.c_str()) != 0) {
      throw IoError("file '" + pointer + "': cannot update the latest pointer: " + errno_text());
    }
    sync_directory(dir);
  } catch (const IoError& e) {
    ::unlink(pointer_temporary.c_str());
    std::cerr << "tessera: warning: checkpoint '" << final_path << "' is committed, but " << e.what()
              << "; 'latest' still names an earlier checkpoint" << std::endl;
  }
}

int create_exclusive(const std::string& path) {
  // A leftover (of a killed save, or a symlink someone planted) goes first; unlink removes a
  // symlink itself, and O_EXCL | O_NOFOLLOW refuses one planted between the two calls.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw IoError("file '" + path + "': cannot remove the leftover: " + errno_text());
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("file '" + path + "': cannot create: " + errno_text());
  return fd;
}

std::vector<std::string> prunable(const std::string& dir, int keep, const std::string& just_written) {
  std::vector<std::string> doomed;
  auto complete = list_complete(dir);
  // The file just written stays whatever its step: `latest` names it (another run's higher
  // steps in the directory must not make a save delete itself).
  const std::string protected_name = just_written.empty() ? std::string() : fs::path(just_written).filename().string();
  // Files named for steps past the one just written are none of this run's (a run saves its
  // steps in order, and a resume continues from the newest): they are neither pruned nor counted
  // toward `keep`. Until the forty-fifth session two files copied into a running job's directory
  // under high step numbers took two of its three places, and its own last two were removed.
  const std::int64_t written_step = parse_file_name(protected_name).value_or(std::numeric_limits<std::int64_t>::max());
  std::vector<std::string> others;
  for (const auto& [step, path] : complete) {
    if (fs::path(path).filename().string() != protected_name && step < written_step) others.push_back(path);
  }
  const std::size_t others_kept = static_cast<std::size_t>(std::max(0, keep - (protected_name.empty() ? 0 : 1)));
  if (keep > 0 && others.size() > others_kept) {
    for (std::size_t i = 0; i + others_kept < others.size(); ++i) doomed.push_back(others[i]);
  }
  const std::vector<std::string> leftovers = leftover_temporaries(dir);
  doomed.insert(doomed.end(), leftovers.begin(), leftovers.end());
  return doomed;
}

std::vector<std::string> leftover_temporaries(const std::string& dir) {
  std::error_code ec;
  return checkpoint_entries(dir, true, ec);
}

std::vector<std::string> remove_files(const std::vector<std::string>& paths) {
  std::vector<std::string> removed;
  for (const auto& path : paths) {
    if (::unlink(path.c_str()) == 0) removed.push_back(path);
  }
  return removed;
}

std::vector<std::string> prune(const std::string& dir, int keep, const std::string& just_written) {
  return remove_files(prunable(dir, keep, just_written));
}

namespace {

// The one removal thread of this process; joined before the next starts and at exit.
class Remover {
 public:
  void start(std::vector<std::string> paths, std::shared_ptr<void> keep_until_done) {
    wait();
    int provided = MPI_THREAD_SINGLE;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized != 0) MPI_Query_thread(&provided);
    if (initialized != 0 && provided < MPI_THREAD_FUNNELED) {
      remove_files(paths);
      return;
    }
    worker_ = std::thread([paths = std::move(paths), hold = std::move(keep_until_done)]() mutable {
      remove_files(paths);
      hold.reset();
    });
  }
  void wait() {
    if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
  }
  ~Remover() { wait(); }

 private:
  std::thread worker_;
};

Remover& remover() {
  static Remover instance;
  return instance;
}

}  // namespace

void remove_in_background(std::vector<std::string> paths, std::shared_ptr<void> keep_until_done) {
  remover().start(std::move(paths), std::move(keep_until_done));
}

void wait_for_removals() { remover().wait(); }

std::vector<std::string> remove_checkpoints(const std::string& dir) {
  wait_for_removals();
  std::error_code ec;
  const std::vector<std::string> doomed = checkpoint_entries(dir, false, ec);
  if (ec) throw IoError("checkpoint directory '" + dir + "': cannot list: " + ec.message());
  // All or nothing: a directory under one of these names, which unlink cannot remove, is found
  // before any checkpoint is gone.
  if (const std::string obstacle = first_directory(doomed); !obstacle.empty()) {
    throw IoError("checkpoint directory '" + dir + "': '" + obstacle +
                  "' is a directory where a checkpoint's file goes; nothing was removed");
  }
  for (const auto& path : doomed) {
    // unlink, not remove_all: a symlink is removed itself, never what it points to.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      throw IoError("file '" + path + "': cannot remove: " + errno_text());
    }
  }
  if (!doomed.empty()) sync_directory(dir);
  return doomed;
}

void test_kill_point(std::string_view point, int rank) {
  const char* value = std::getenv("TESSERA_CHECKPOINT_TEST_KILL");
  if (value == nullptr) return;
  const std::string wanted = std::string(point) + ":" + std::to_string(rank);
  if (wanted == value) {
    std::fprintf(stderr, "TESSERA_CHECKPOINT_TEST_KILL: rank %d kills itself at '%s'\n", rank,
                 std::string(point).c_str());
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

}  // namespace tessera::checkpoint_dir

namespace tessera {

// The rename is the commit point, so the newest complete file wins even when the process died
// between the rename and the `latest` update; `latest` itself is for people and tools.
std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto complete = checkpoint_dir::list_complete(dir);
  if (complete.empty()) return std::nullopt;
  return complete.back().second;
}

std::string resolve_checkpoint(const std::string& dir_or_file, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir_or_file, ec)) {
    auto latest = latest_checkpoint(dir_or_file);
    if (!latest) {
      throw IoError(std::string(what) + ": directory '" + dir_or_file +
                    "' holds no complete checkpoint (ckpt_<step>.h5)");
    }
    return *latest;
  }
  if (!std::filesystem::exists(dir_or_file, ec)) {
    throw IoError(std::string(what) + ": " + checkpoint_format::file_context(dir_or_file) + " does not exist");
  }
  return dir_or_file;
}

}  // namespace tessera
