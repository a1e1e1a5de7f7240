// read_checkpoint_info and verify_checkpoint on byte-mutated real checkpoints (seeds in
// corpus/checkpoint are files written by save_checkpoint). The input is written to a temporary
// file, which both read on this one process; MPI is initialised once, as ckpt_tool does.
// A bad file must end in an IoError (or verify's false), never a crash, a sanitizer report,
// an allocation past -rss_limit_mb or a hang.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "io/checkpoint.h"

namespace {

std::string temp_file;

void remove_temp_file() { std::remove(temp_file.c_str()); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) std::abort();
  const char* dir = std::getenv("TMPDIR");
  temp_file = std::string(dir ? dir : "/tmp") + "/tessera_checkpoint_fuzz_" + std::to_string(getpid()) + ".h5";
  std::atexit(remove_temp_file);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::FILE* out = std::fopen(temp_file.c_str(), "wb");
  if (out == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, out) != size) std::abort();
  if (std::fclose(out) != 0) std::abort();
  try {
    tessera::CheckpointInfo info = tessera::read_checkpoint_info(temp_file);
    (void)info;
  } catch (const tessera::Error&) {
  }
  std::string report;
  (void)tessera::verify_checkpoint(temp_file, &report);
  return 0;
}
