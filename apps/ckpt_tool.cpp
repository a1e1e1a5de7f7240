// ckpt_tool: inspect tessera checkpoints.
//   ckpt_tool list PATH      step, seed, mesh, configuration and every array (path, shape, spec,
//                            logical names, dtype, chunk)
//   ckpt_tool verify PATH    reads every chunk so each Fletcher32 checksum and digest entry is
//                            checked; exit 3 on a failure
// PATH is a checkpoint file or a directory (its latest complete checkpoint). Runs on one process
// (mpirun is not needed). Exit codes: 0 ok, 2 a bad command line or a file that is not a
// checkpoint, 3 a checkpoint that fails its integrity checks (corrupt, incomplete, truncated).
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "apps/cli_main.h"
#include "io/checkpoint.h"
#include "io/io_errors.h"
#include "mesh/environment.h"
#include "core/text.h"

namespace {


// Logical names in parentheses; an unnamed dimension shows as None.
std::string names_text(std::vector<std::string> names) {
  for (auto& n : names) n = n.empty() ? "None" : n;
  return tessera::parenthesized(names);
}

int list(const std::string& path) {
  const auto info = tessera::read_checkpoint_info(tessera::resolve_checkpoint(path, "list"));
  std::cout << "file    " << info.file << "\nformat  " << info.format << " v" << info.version << "\nstep    "
            << info.step << "\nseed    " << info.seed << "\nmesh    ";
  for (std::size_t i = 0; i < info.mesh_axis_names.size(); ++i) {
    std::cout << (i ? ", " : "") << info.mesh_axis_names[i] << ": " << info.mesh_axis_sizes[i];
  }
  std::cout << "\nconfig  " << info.config << "\n\n";
  std::printf("%-48s %-20s %-28s %-26s %-5s %s\n", "array", "shape", "spec", "logical names", "dtype", "chunk");
  for (const auto& a : info.arrays) {
    std::printf("%-48s %-20s %-28s %-26s %-5s %s\n", a.path.c_str(), tessera::shape_to_string(a.shape).c_str(),
                a.spec.c_str(), a.logical_names.empty() ? "-" : names_text(a.logical_names).c_str(),
                std::string(tessera::dtype_name(a.dtype)).c_str(),
                a.chunk.empty() ? "-" : tessera::shape_to_string(a.chunk).c_str());
  }
  return 0;
}

int verify(const std::string& path) {
  const std::string file = tessera::resolve_checkpoint(path, "verify");
  // A file that is not a checkpoint at all is bad input (exit 2, one message), not a failed check.
  tessera::read_checkpoint_info(file);
  std::string report;
  const bool ok = tessera::verify_checkpoint(file, &report);
  std::cout << report << (report.empty() || report.back() == '\n' ? "" : "\n") << (ok ? "ok" : "FAILED") << std::endl;
  if (!ok) {
    std::size_t failed = 0, arrays = 0;
    for (std::size_t at = 0; (at = report.find('\n', at)) != std::string::npos; ++at) {
      const std::size_t next = at + 1;
      if (report.compare(next, 7, "FAILED ") == 0) ++failed;
      if (report.compare(next, 7, "FAILED ") == 0 || report.compare(next, 7, "ok     ") == 0) ++arrays;
    }
    std::cerr << "ckpt_tool: '" << file << "' failed verification: " << failed << " of " << arrays << " arrays\n";
  }
  return ok ? 0 : 3;
}

// Runs `command`, raising an integrity failure of the file as IntegrityError (exit code 3).
template <class F>
int integrity_checked(F&& command) {
  try {
    return command();
  } catch (const tessera::IntegrityError&) {
    throw;
  } catch (const tessera::IoError& e) {
    tessera::checkpoint_io::throw_io_error(e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  tessera::apps::CommandLine app{"tessera checkpoint tool: list a checkpoint's arrays, verify its checksums"};
  app.require_subcommand(1);
  std::string path;
  auto& list_cmd = app.add_subcommand("list", "step, mesh, configuration and every array");
  list_cmd.add_option("path", path, "checkpoint file or directory").required();
  auto& verify_cmd = app.add_subcommand("verify", "check every chunk's Fletcher32 checksum");
  verify_cmd.add_option("path", path, "checkpoint file or directory").required();
  return tessera::apps::parse_and_run("ckpt_tool", app, argc, argv, [&](int) {
    // One process reads the file: under mpirun every rank printed the whole report.
    int ranks = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (ranks > 1) {
      throw tessera::UsageError("runs as one process (it reads the file itself), not on " + std::to_string(ranks) +
                                " ranks: start it without mpirun");
    }
    return integrity_checked([&] { return list_cmd.parsed() ? list(path) : verify(path); });
  });
}
