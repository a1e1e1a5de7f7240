// Files that tessera's programs open by a name a user gives (a checkpoint, --data, --metrics):
// opened without ever waiting on a FIFO, and named by their kind in messages.
//
// open(2) of a FIFO waits for the other end: a FIFO given as a file to read would block its
// reader until some process writes to it, and one given as a file to write until some process
// reads it, while the job's other ranks wait in their next collective (docs/design.md, "Errors:
// the discipline every layer follows"). These open with O_NONBLOCK, which returns at once, and
// check what they opened before they use it.
#pragma once

#include <string>

namespace tessera {

// What `path` names, for a message: "a regular file", "a directory", "a FIFO", "a socket", "a
// character device", "a block device", "a file of another kind", or "nothing" where it does not
// exist (symbolic links followed).
std::string file_kind(const std::string& path);

// A descriptor of `path` opened read-only (and close-on-exec) when it is a regular file, else
// -1 with `why` set to what completes "file 'PATH' ...": "does not exist", "is a FIFO, not a
// regular file" (and the like for the other kinds), or "cannot be opened: <the reason>". Never
// waits: a FIFO is refused without waiting for a writer.
int open_regular_for_reading(const std::string& path, std::string& why);

// Empty when `path` is a regular file this process can open for reading, else the `why` of
// open_regular_for_reading. For a check before a library (HDF5) opens the file by name.
std::string regular_file_problem(const std::string& path);

// A descriptor of `path` opened for writing (created 0644 if need be; a regular file appended to
// or truncated), else -1 with `why` set to what completes "file 'PATH' ...": "is a FIFO that no
// process reads", "is a block device", or "cannot be opened for writing: <the reason>" (a
// directory: "Is a directory"). Never waits: a FIFO that no process reads is refused instead of
// waiting for a reader; one that is read is taken, and writes to it then block as writes to a
// pipe do (standard output piped to a slow reader). A character device (/dev/null, a terminal)
// is taken as well.
int open_for_writing(const std::string& path, bool append, std::string& why);

// Writes all of `text` to `fd`, retrying short writes and EINTR; false with `why` set on failure.
bool write_all(int fd, const std::string& text, std::string& why);

}  // namespace tessera
