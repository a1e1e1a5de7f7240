// Files opened by a name a user gives (core/files.h): a FIFO, a device or a directory is refused
// at once with its kind named, a FIFO that no process reads is refused for writing instead of
// waiting for a reader, and a write to a pipe whose reader went away fails with EPIPE instead of
// ending the process with SIGPIPE. A regression here would wait forever: ctest's timeout ends it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/files.h"

namespace tessera {
namespace {

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "tessera_files_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string fifo(const std::string& name) const {
    const std::string p = path(name);
    EXPECT_EQ(::mkfifo(p.c_str(), 0644), 0) << std::strerror(errno);
    return p;
  }
  static std::string contents(const std::string& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_;
};

TEST_F(Files, KindNamesWhatAPathIs) {
  std::ofstream(path("plain")) << "x";
  EXPECT_EQ(file_kind(path("plain")), "a regular file");
  EXPECT_EQ(file_kind(dir_), "a directory");
  EXPECT_EQ(file_kind(fifo("pipe")), "a FIFO");
  EXPECT_EQ(file_kind("/dev/null"), "a character device");
  EXPECT_EQ(file_kind(path("missing")), "nothing");
}

TEST_F(Files, ReadingTakesOnlyARegularFile) {
  std::ofstream(path("plain")) << "abc";
  std::string why;
  const int fd = open_regular_for_reading(path("plain"), why);
  ASSERT_GE(fd, 0) << why;
  char buffer[8] = {};
  EXPECT_EQ(::read(fd, buffer, sizeof buffer), 3);  // blocking reads as usual
  EXPECT_STREQ(buffer, "abc");
  EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  ::close(fd);

  // No writer ever opens this FIFO: an open(2) for reading without O_NONBLOCK would wait here.
  EXPECT_EQ(open_regular_for_reading(fifo("pipe"), why), -1);
  EXPECT_EQ(why, "is a FIFO, not a regular file");
  EXPECT_EQ(open_regular_for_reading(dir_, why), -1);
  EXPECT_EQ(why, "is a directory, not a regular file");
  EXPECT_EQ(open_regular_for_reading("/dev/zero", why), -1);
  EXPECT_EQ(why, "is a character device, not a regular file");
  EXPECT_EQ(open_regular_for_reading(path("missing"), why), -1);
  EXPECT_EQ(why, "does not exist");
  EXPECT_EQ(open_regular_for_reading(path("missing") + "/below", why), -1);
  EXPECT_EQ(why, "does not exist");

  // The check before a library opens the file by name: the same answers, no descriptor kept.
  EXPECT_EQ(regular_file_problem(path("plain")), "");
  EXPECT_EQ(regular_file_problem(path("pipe")), "is a FIFO, not a regular file");
  EXPECT_EQ(regular_file_problem(path("missing")), "does not exist");
}

TEST_F(Files, WritingTruncatesOrAppendsARegularFile) {
  std::ofstream(path("log")) << "old\n";
  std::string why;
  int fd = open_for_writing(path("log"), true, why);
  ASSERT_GE(fd, 0) << why;
  ASSERT_TRUE(write_all(fd, "new\n", why)) << why;
  ::close(fd);
  EXPECT_EQ(contents(path("log")), "old\nnew\n");
  fd = open_for_writing(path("log"), false, why);
  ASSERT_GE(fd, 0) << why;
  ASSERT_TRUE(write_all(fd, "only\n", why)) << why;
  ::close(fd);
  EXPECT_EQ(contents(path("log")), "only\n");
  fd = open_for_writing(path("created"), false, why);
  ASSERT_GE(fd, 0) << why;
  ::close(fd);
  struct stat st {};
  ASSERT_EQ(::stat(path("created").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777 & ~0644, 0u);
  fd = open_for_writing("/dev/null", false, why);
  EXPECT_GE(fd, 0) << why;
  if (fd >= 0) ::close(fd);
}

TEST_F(Files, WritingRefusesAFifoNoOneReadsAndADirectory) {
  std::string why;
  // An open(2) for writing without O_NONBLOCK would wait here for a reader.
  EXPECT_EQ(open_for_writing(fifo("pipe"), false, why), -1);
  EXPECT_EQ(why, "is a FIFO that no process reads");
  EXPECT_EQ(open_for_writing(dir_, false, why), -1);
  EXPECT_EQ(why, "cannot be opened for writing: Is a directory");
  EXPECT_EQ(open_for_writing(path("missing") + "/below", false, why), -1);
  EXPECT_EQ(why, "cannot be opened for writing: No such file or directory");
}

TEST_F(Files, WritingTakesAFifoThatIsRead) {
  const std::string p = fifo("pipe");
  const int reader = ::open(p.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0) << std::strerror(errno);
  std::string why;
  const int fd = open_for_writing(p, false, why);
  ASSERT_GE(fd, 0) << why;
  ASSERT_TRUE(write_all(fd, "line\n", why)) << why;
  char buffer[8] = {};
  EXPECT_EQ(::read(reader, buffer, sizeof buffer), 5);
  EXPECT_STREQ(buffer, "line\n");
  ::close(fd);
  ::close(reader);
}

TEST_F(Files, AWriteToAPipeWithoutReaderFailsWithoutSigpipe) {
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  ::close(ends[0]);
  std::string why;
  // Without the mask write_all sets, SIGPIPE's default action would end this test program.
  EXPECT_FALSE(write_all(ends[1], "lost\n", why));
  EXPECT_EQ(why, std::strerror(EPIPE));
  sigset_t pending;
  sigemptyset(&pending);
  ASSERT_EQ(::sigpending(&pending), 0);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0) << "the SIGPIPE it raised is left pending";
  sigset_t mask;
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, nullptr, &mask), 0);
  EXPECT_EQ(sigismember(&mask, SIGPIPE), 0) << "SIGPIPE left blocked";
  ::close(ends[1]);
}

}  // namespace
}  // namespace tessera
