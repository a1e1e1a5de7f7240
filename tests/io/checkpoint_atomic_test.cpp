// Atomicity: a save in which one rank is killed (SIGKILL) leaves the previous checkpoint as the
// latest, restorable bit for bit; the partial file is never taken for a complete one; the next
// save succeeds and removes the leftover. This test is a plain program that runs the MPI jobs
// itself (mpiexec via std::system) and expects the killed ones to fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "core/error.h"
#include "io/checkpoint_dir.h"
#include "io/checkpoint.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

const std::string dir = std::string(TESSERA_IO_TEST_TMP) + "/atomic";

// Exit status of `checkpoint_crash_helper ARGS` on 4 ranks, with an optional kill point.
int run_helper(const std::string& args, const std::string& kill = "") {
  std::string command = "timeout 60 " + std::string(TESSERA_MPIEXEC) + " -n 4 " + TESSERA_MPIEXEC_FLAGS;
  if (!kill.empty())
    command = "TESSERA_CHECKPOINT_TEST_KILL=" + kill + " " + command + " -x TESSERA_CHECKPOINT_TEST_KILL";
  command += " " + std::string(TESSERA_CRASH_HELPER) + " " + args + " 2>&1";
  std::printf("$ %s\n", command.c_str());
  std::fflush(stdout);
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string latest_pointer() {
  std::ifstream in(dir + "/latest");
  std::string line;
  std::getline(in, line);
  return line;
}

int temporary_files() {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) n += entry.path().string().ends_with(".tmp");
  return n;
}

TEST(CheckpointAtomicity, KilledSaveLeavesThePreviousCheckpointAndIsCleanedByTheNext) {
  fs::remove_all(dir);
  ASSERT_EQ(run_helper("save " + dir + " 1"), 0);
  ASSERT_EQ(latest_checkpoint(dir), dir + "/ckpt_00000001.h5");

  // Rank 1 dies after the file is written and closed, before rank 0 renames it.
  EXPECT_NE(run_helper("save " + dir + " 2", "before_rename:1"), 0);
  EXPECT_TRUE(fs::exists(dir + "/ckpt_00000002.h5.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/ckpt_00000002.h5"));
  EXPECT_EQ(latest_checkpoint(dir), dir + "/ckpt_00000001.h5");
  EXPECT_EQ(latest_pointer(), "ckpt_00000001.h5");
  EXPECT_EQ(run_helper("restore " + dir + " 1"), 0);

  // Rank 1 dies while the file is still open (data written, nothing flushed or closed).
  EXPECT_NE(run_helper("save " + dir + " 3", "after_write:1"), 0);
  EXPECT_FALSE(fs::exists(dir + "/ckpt_00000003.h5"));
  EXPECT_EQ(latest_checkpoint(dir), dir + "/ckpt_00000001.h5");
  EXPECT_EQ(run_helper("restore " + dir + " 1"), 0);

  // The next save succeeds, becomes the latest and removes the leftovers.
  EXPECT_EQ(run_helper("save " + dir + " 4"), 0);
  EXPECT_EQ(temporary_files(), 0);
  auto complete = checkpoint_dir::list_complete(dir);
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(complete[0].first, 1);
  EXPECT_EQ(complete[1].first, 4);
  EXPECT_EQ(latest_pointer(), "ckpt_00000004.h5");
  EXPECT_EQ(run_helper("restore " + dir + " 4"), 0);
  fs::remove_all(dir);
}

// The free-space check refuses a checkpoint larger than the free space, not only one twice as
// large: asked for a quarter more than is free it refuses, naming the step and the sizes; asked
// for a quarter of it, it passes. (The margins leave room for what other processes write
// meanwhile; a file system that reports no space is not judged.)
TEST(CheckpointDirectory, FreeSpaceCheckRefusesMoreThanIsFree) {
  const std::string d = std::string(TESSERA_IO_TEST_TMP) + "/free_space";
  fs::create_directories(d);
  const std::optional<std::uint64_t> free = checkpoint_dir::free_bytes(d);
  if (!free || *free < 1024) GTEST_SKIP() << "the file system reports no free space";
  EXPECT_NO_THROW(checkpoint_dir::check_free_space(d, *free / 4, 7));
  try {
    checkpoint_dir::check_free_space(d, *free + *free / 4, 7);
    ADD_FAILURE() << "no IoError";
  } catch (const IoError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("checkpoint directory '" + d +
                                                  "': not enough free space for the checkpoint of step 7: it needs " +
                                                  std::to_string(*free + *free / 4) + " bytes, "))
        << e.what();
  }
  fs::remove_all(d);
}

// Another run's higher steps in the directory must not make a save delete the file it just
// wrote (which `latest` names): it counts as one of `keep`, the rest are the highest steps.
// File names and steps: every int64 step has its name and back; a name of more digits than a step
// has is no checkpoint's (before, its digits wrapped into some step, which --resume and pruning
// then took for a checkpoint of that step).
TEST(CheckpointNames, StepsAndFileNamesRoundTrip) {
  EXPECT_EQ(checkpoint_dir::file_name(10), "ckpt_00000010.h5");
  for (const std::int64_t step : {std::int64_t{0}, std::int64_t{10}, std::int64_t{123456789},
                                  std::numeric_limits<std::int64_t>::max()}) {
    EXPECT_EQ(checkpoint_dir::parse_file_name(checkpoint_dir::file_name(step)), step);
  }
  for (const char* name : {"ckpt_9223372036854775808.h5", "ckpt_99999999999999999999.h5", "ckpt_0000001.h5",
                           "ckpt_0000000a.h5", "ckpt_00000010.h5.tmp", "ckpt_-0000010.h5"}) {
    EXPECT_EQ(checkpoint_dir::parse_file_name(name), std::nullopt) << name;
  }
}

// Only regular files are complete checkpoints: a directory under a later step's name is neither
// listed nor taken for the latest (a restore of the directory would have read it as the newest
// checkpoint and failed on it, or a save's pruning counted it), nor is a temporary file.
TEST(CheckpointNames, ListAndLatestTakeRegularFilesOnly) {
  const std::string d = std::string(TESSERA_IO_TEST_TMP) + "/regular_only";
  fs::remove_all(d);
  fs::create_directories(d + "/" + checkpoint_dir::file_name(9));
  std::ofstream(d + "/" + checkpoint_dir::file_name(5)) << "x";
  std::ofstream(d + "/" + checkpoint_dir::file_name(7) + ".tmp") << "x";
  const auto complete = checkpoint_dir::list_complete(d);
  ASSERT_EQ(complete.size(), 1u);
  EXPECT_EQ(complete[0].first, 5);
  EXPECT_EQ(latest_checkpoint(d), d + "/" + checkpoint_dir::file_name(5));
  EXPECT_EQ(resolve_checkpoint(d, "test"), d + "/" + checkpoint_dir::file_name(5));
  fs::remove_all(d);
}

// The file just written stays, and so does every file named for a later step: none of the run's
// own (a run saves its steps in order). `keep` counts the file just written and those before it.
// Until the forty-fifth session the later files counted toward `keep` and were pruned as the
// newest: files copied into a running job's directory under high step numbers took its places,
// and its own last checkpoints were removed.
TEST(CheckpointPrune, NeverRemovesTheFileJustWrittenNorLaterOnes) {
  const std::string d = std::string(TESSERA_IO_TEST_TMP) + "/prune";
  fs::remove_all(d);
  fs::create_directories(d);
  for (int step : {1, 2, 3, 5, 10, 30}) std::ofstream(d + "/" + checkpoint_dir::file_name(step)) << "x";
  const auto left = [&] {
    std::vector<std::int64_t> steps;
    for (const auto& [step, path] : checkpoint_dir::list_complete(d)) steps.push_back(step);
    return steps;
  };
  checkpoint_dir::prune(d, 2, d + "/" + checkpoint_dir::file_name(5));
  EXPECT_EQ(left(), (std::vector<std::int64_t>{3, 5, 10, 30}));
  checkpoint_dir::prune(d, 1, d + "/" + checkpoint_dir::file_name(5));
  EXPECT_EQ(left(), (std::vector<std::int64_t>{5, 10, 30}));
  // Without a file just written, the newest `keep` stay.
  checkpoint_dir::prune(d, 1, "");
  EXPECT_EQ(left(), (std::vector<std::int64_t>{30}));
}

// `keep` <= 0 keeps every checkpoint (SaveOptions::keep): only the leftovers of interrupted saves
// are removed.
TEST(CheckpointPrune, KeepZeroOrLessKeepsEveryCheckpoint) {
  const std::string d = std::string(TESSERA_IO_TEST_TMP) + "/prune_keep_all";
  fs::remove_all(d);
  fs::create_directories(d);
  for (const int keep : {0, -1}) {
    for (int step : {1, 2, 3}) std::ofstream(d + "/" + checkpoint_dir::file_name(step)) << "x";
    std::ofstream(d + "/" + checkpoint_dir::file_name(4) + ".tmp") << "x";
    const std::vector<std::string> removed = checkpoint_dir::prune(d, keep, d + "/" + checkpoint_dir::file_name(3));
    EXPECT_EQ(removed, (std::vector<std::string>{d + "/" + checkpoint_dir::file_name(4) + ".tmp"})) << "keep " << keep;
    std::vector<std::int64_t> steps;
    for (const auto& [step, path] : checkpoint_dir::list_complete(d)) steps.push_back(step);
    EXPECT_EQ(steps, (std::vector<std::int64_t>{1, 2, 3})) << "keep " << keep;
  }
  fs::remove_all(d);
}

// --overwrite's helper removes checkpoints, leftovers and `latest`, and nothing else.
TEST(CheckpointPrune, RemoveCheckpointsLeavesOtherFiles) {
  const std::string d = std::string(TESSERA_IO_TEST_TMP) + "/remove";
  fs::remove_all(d);
  fs::create_directories(d);
  for (const char* name : {"ckpt_00000010.h5", "ckpt_00000020.h5.tmp", "latest", "latest.tmp", "notes.txt", ".lock"}) {
    std::ofstream(d + "/" + name) << "x";
  }
  fs::create_symlink(d + "/notes.txt", d + "/ckpt_00000030.h5");
  EXPECT_EQ(checkpoint_dir::remove_checkpoints(d).size(), 5u);
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(d)) left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".lock", "notes.txt"}));
}

// A directory under a checkpoint's name is refused before anything is removed (before, every
// checkpoint was gone when the unlink of `latest`, a directory, failed).
TEST(CheckpointPrune, RemoveCheckpointsRemovesNothingWhenOneCannotGo) {
  const std::string d = std::string(TESSERA_IO_TEST_TMP) + "/remove_none";
  fs::remove_all(d);
  fs::create_directories(d + "/latest");
  for (const char* name : {"ckpt_00000010.h5", "ckpt_00000020.h5"}) std::ofstream(d + "/" + name) << "x";
  try {
    checkpoint_dir::remove_checkpoints(d);
    ADD_FAILURE() << "no IoError";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint directory '" + d + "': '" + d +
                                         "/latest' is a directory where a checkpoint's file goes; nothing was removed");
  }
  EXPECT_EQ(checkpoint_dir::list_complete(d).size(), 2u);
}

}  // namespace
}  // namespace tessera
