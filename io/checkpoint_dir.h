// The checkpoint directory: file names, the two-phase commit (temporary name, fsync, rename,
// `latest` pointer), pruning to the last K, and cleaning leftovers of interrupted saves. Local
// POSIX operations only; save_checkpoint runs them on rank 0 after every rank closed the file.
//   <dir>/ckpt_00000010.h5        a complete checkpoint (only ever created by rename)
//   <dir>/ckpt_00000010.h5.tmp    a checkpoint being written, or the leftover of a killed save
//   <dir>/latest                  one line, the file name of the newest complete checkpoint
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::checkpoint_dir {

inline constexpr const char* latest_name = "latest";
inline constexpr const char* temporary_suffix = ".tmp";

// "ckpt_00000010.h5"
std::string file_name(std::int64_t step);
// The step of a complete checkpoint's file name, or nullopt for any other name.
std::optional<std::int64_t> parse_file_name(std::string_view name);

// mkdir -p; throws IoError naming the directory.
void make_directories(const std::string& dir);
// Complete checkpoints in `dir` as (step, path), oldest first. Empty when dir does not exist.
std::vector<std::pair<std::int64_t, std::string>> list_complete(const std::string& dir);

// Before a run trains (train_mlp, train_lm): throws IoError naming `dir` where a save would fail
// at its end, after the work: a directory at a checkpoint's name (ckpt_<step>.h5, its .tmp,
// `latest`, `latest.tmp`), a path too long to hold the longest file name under PATH_MAX, or a
// directory this user may not write (faccessat(2) with the effective IDs; root may write any).
void check_room_for_saves(const std::string& dir);

// Throws IoError naming `dir` when its file system has fewer than `bytes` free for the checkpoint
// of `step`. Where the file system does not say, nothing is checked. A save checks this before it
// creates the file, so that a full disk is named as one rather than as an MPI write's I/O error.
void check_free_space(const std::string& dir, std::uint64_t bytes, std::int64_t step);
// The bytes an unprivileged user may still write on the file system of `dir`, or nullopt where it
// does not say (statvfs fails, reports no blocks, or a product past 2^64).
std::optional<std::uint64_t> free_bytes(const std::string& dir);

// fsync of a file's data, and of a directory's entries (so a rename is durable).
void sync_file(const std::string& path);
void sync_directory(const std::string& dir);

// Makes `temporary` visible as `final_path` (fsync, rename, fsync of the directory) and then
// points `latest` at it (written to a temporary name and renamed too). Throws IoError when the
// checkpoint cannot be committed; a `latest` that cannot be written after the commit is a warning
// on stderr, and `latest` keeps naming the checkpoint before.
void commit(const std::string& temporary, const std::string& final_path);
// Removes complete checkpoints beyond the newest `keep` (keep <= 0: none) and every leftover
// temporary file. Returns the removed paths. `just_written` (the file `latest` names) is never
// removed, and neither is a checkpoint of a higher step (none of the run's own): `keep` counts
// `just_written` and the highest of the steps below it.
std::vector<std::string> prune(const std::string& dir, int keep, const std::string& just_written = {});
// What prune would remove, removing nothing.
std::vector<std::string> prunable(const std::string& dir, int keep, const std::string& just_written = {});
// The temporary files in `dir` (a checkpoint's and `latest`'s), sorted: under the directory's
// lock, the leftovers of saves that were killed or failed.
std::vector<std::string> leftover_temporaries(const std::string& dir);
// Unlinks each path (a missing one is skipped); returns those removed.
std::vector<std::string> remove_files(const std::vector<std::string>& paths);
// Unlinks `paths` on a thread of this process, so that the caller does not wait for the file
// system to free a large file (8 ranks of 2 cores: 32 ms of a 150 ms save of 96 MiB). `keep_until_done`
// (a directory lock, or null) is released by that thread when it is done. First waits for the
// removal started before, so at most one runs. Without MPI_THREAD_FUNNELED (MPI initialised by
// another caller with MPI_THREAD_SINGLE) the files are removed before it returns.
void remove_in_background(std::vector<std::string> paths, std::shared_ptr<void> keep_until_done = nullptr);
// Waits for the removal remove_in_background started, if any (a no-op on that thread itself).
// Every save waits first, a directory lock waits before it is released, and the process waits
// at exit.
void wait_for_removals();
// Removes every complete checkpoint, leftover temporary file and the `latest` pointer (nothing
// else: the directory and other files stay). For train_mlp --overwrite. Throws IoError.
std::vector<std::string> remove_checkpoints(const std::string& dir);

// Creates `path` as a new regular file for writing (O_CREAT | O_EXCL | O_NOFOLLOW), first
// unlinking a leftover of that name (a symlink planted there is removed, never followed).
// Returns the descriptor. Throws IoError naming the file.
int create_exclusive(const std::string& path);

// Test hook: when the environment variable TESSERA_CHECKPOINT_TEST_KILL is "<point>:<rank>"
// and this process is that rank, it kills itself with SIGKILL here. Points used by save:
// "after_write" (data written, file still open) and "before_rename" (closed, not committed),
// each also as "after_write@<step>" / "before_rename@<step>" to pick one save of a run;
// train_mlp adds "step<S>" (rank R dies just before computing step S).
void test_kill_point(std::string_view point, int rank);

}  // namespace tessera::checkpoint_dir
