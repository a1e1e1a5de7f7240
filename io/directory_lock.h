// The lock of a checkpoint directory, so two jobs never write one directory at once:
// <dir>/.lock, an exclusive flock held by rank 0 for a save or a whole training run, the holder's
// "host <name> pid <pid>" written in it for the message the second job gets. The kernel drops
// the lock when its holder dies, so a killed job leaves at most a stale file, which the next
// job simply locks again.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "mesh/communicator.h"

namespace tessera {

class DirectoryLock {
 public:
  static constexpr const char* file_name = ".lock";

  // Local. Makes the directory when missing and locks it. Throws IoError:
  //   checkpoint directory 'D' is in use by another job (lock 'D/.lock' held by host H pid P)
  static std::unique_ptr<DirectoryLock> acquire(const std::string& dir);
  // Local: true when this process holds the lock of `dir` (a save inside a locked run).
  static bool held_here(const std::string& dir);

  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock();

 private:
  DirectoryLock(int fd, std::string key) : fd_(fd), key_(std::move(key)) {}
  int fd_;
  std::string key_;  // the directory's canonical path
};

// Collective over `comm`: rank 0 acquires the lock (and holds it in the returned object; other
// ranks get null); when it cannot, every rank throws the same IoError, rank 0's message.
std::unique_ptr<DirectoryLock> lock_checkpoint_directory(const Communicator& comm, const std::string& dir);

}  // namespace tessera

namespace tessera {
// Collective over `comm`: rank 0's optional message, on every rank (for checks only rank 0 makes).
std::optional<std::string> broadcast_root_message(const Communicator& comm, const std::optional<std::string>& message);
}  // namespace tessera
