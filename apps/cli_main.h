// The shared ending of tessera's programs. Bad input is a replicated fact (or one the io layer
// agrees on), so every rank raises it identically: rank 0 prints one message, every rank exits
// with code 2, nobody hangs. Anything else may be one rank's alone, so it ends the whole job.
#pragma once

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <exception>
#include <iostream>

#include "core/error.h"
#include "core/version.h"

namespace tessera::apps {

// Parses the command line into `app`'s options, then returns run(rank), or the exit code of the
// error it raised (--help, --version: 0; CLI11 parse errors and tessera::Error: 2).
template <class Run>
int parse_and_run(const char* program, CLI::App& app, int argc, char** argv, Run&& run) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  app.set_version_flag("--version", std::string(program) + " (tessera " + std::string(version_string()) + ")");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  try {
    return run(rank);
  } catch (const Error& e) {
    if (rank == 0) std::cerr << program << ": " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << " (rank " << rank << "): " << e.what() << '\n';
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

}  // namespace tessera::apps
