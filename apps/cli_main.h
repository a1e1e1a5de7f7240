// The shared ending of tessera's programs, and the error discipline of the apps.
//
// Bad input is a replicated fact: flags, specs, rules and shapes are checked on every rank before
// any collective, and the io layer agrees on file problems with one collective, so such an error
// is raised by every rank. But an error may also be raised by some ranks only (an allocation, an
// MPI call, a bug) while the others sit in a collective; returning 2 on the failing ranks alone
// would leave the others hung. So when `run` throws a tessera::Error, the ranks agree before
// exiting:
//   - every failing rank enters an MPI_Ibarrier on a communicator of its own (a duplicate of
//     MPI_COMM_WORLD made before `run`, so it cannot match a collective `run` was inside) and
//     polls it for up to failed_rank_wait_seconds() (mesh/agree.h: 3 s unless
//     TESSERA_FAILED_RANK_WAIT says otherwise);
//   - if it completes, every rank failed: rank 0 prints its message once ("program: message")
//     and every rank returns 2 (3 for an IntegrityError: a checkpoint that fails its checks);
//   - if not, some rank is elsewhere (in a collective, or still running): the rank prints
//     "program: rank R: message" and calls MPI_Abort(MPI_COMM_WORLD, 2), so the job ends within
//     seconds with exit code 2 and the message.
// A rank that returns normally never waits on the barrier; a failing rank then aborts the job.
// Any other exception (std::bad_alloc, ...) is one rank's: it prints and aborts with code 1.
// A hidden debug hook, TESSERA_FAULT=throw_on_rank:R, makes rank R raise an Error at the start
// of `run` while the others go on (tests of this path).
#pragma once

#include <mpi.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "apps/cli.h"
#include "core/error.h"
#include "mesh/agree.h"

namespace tessera::apps {

// TESSERA_FAULT=mpi_error: every rank raises an MpiError (the exit code of a failure of MPI).
inline bool fault_mpi_error() {
  const char* fault = std::getenv("TESSERA_FAULT");
  return fault != nullptr && std::string(fault) == "mpi_error";
}

// The rank TESSERA_FAULT=throw_on_rank:R names, or -1.
inline int fault_rank() {
  const char* fault = std::getenv("TESSERA_FAULT");
  const std::string prefix = "throw_on_rank:";
  if (fault == nullptr || std::string(fault).rfind(prefix, 0) != 0) return -1;
  try {
    return std::stoi(std::string(fault).substr(prefix.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

// True when every rank of `comm` enters this within failed_rank_wait_seconds().
inline bool all_ranks_failed(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(comm, &request) != MPI_SUCCESS) return false;
  return wait_until_done(request);  // when not, the request stays pending; MPI_Abort follows
}

// Parses the command line into `app`'s options, then returns run(rank), or the exit code of the
// error it raised (--help, --version: 0; CLI11 parse errors and tessera::Error: 2;
// tessera::IntegrityError: 3; tessera::MpiError, a failed MPI call or a message MPI cannot carry: 1;
// anything else aborts the job with 1).
template <class Run>
int parse_and_run(const char* program, CommandLine& app, int argc, char** argv, Run&& run) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // The command line is the same on every rank: every rank returns here alike.
  if (const int rc = app.parse(program, argc, argv, rank); rc >= 0) return rc;
  MPI_Comm agree = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &agree) != MPI_SUCCESS) {
    std::cerr << program << ": rank " << rank << ": MPI_Comm_dup failed\n";
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  try {
    if (fault_rank() == rank) throw Error("TESSERA_FAULT: error raised on rank " + std::to_string(rank) + " only");
    if (fault_mpi_error()) throw MpiError("TESSERA_FAULT: an MPI error raised on every rank");
    const int rc = run(rank);
    MPI_Comm_free(&agree);
    return rc;
  } catch (const Error& e) {
    // Exit codes: 3 a checkpoint that fails its integrity checks, 1 a failure of MPI (a runtime
    // failure, as the help's footer says; until the forty-fifth session it exited 2, as bad
    // input), 2 any other bad input.
    const int code = dynamic_cast<const IntegrityError*>(&e) != nullptr ? 3
                     : dynamic_cast<const MpiError*>(&e) != nullptr   ? 1
                                                                      : 2;
    if (all_ranks_failed(agree)) {
      if (rank == 0) std::cerr << program << ": " << e.what() << '\n';
      MPI_Comm_free(&agree);
      return code;
    }
    std::cerr << program << ": rank " << rank << ": " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, code);
    return code;
  } catch (const std::exception& e) {
    std::cerr << program << " (rank " << rank << "): " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

}  // namespace tessera::apps
