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
//     polls it for up to kFailedRankWaitSeconds (mesh/agree.h: 3 s);
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

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/version.h"
#include "mesh/agree.h"

namespace tessera::apps {

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

// True when every rank of `comm` enters this within kFailedRankWaitSeconds.
inline bool all_ranks_failed(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(comm, &request) != MPI_SUCCESS) return false;
  return wait_until_done(request);  // when not, the request stays pending; MPI_Abort follows
}

// The footer of every app's --help (the README's "Exit codes" table says the same).
inline constexpr const char* kExitCodes =
    "Exit codes: 0 success; 2 bad input (a flag, spec, rule, mesh, shape or file refused before any work,\n"
    "or a training loss that is no longer finite); 3 a checkpoint that fails its integrity checks (corrupt,\n"
    "incomplete or truncated); 1 a runtime failure (an MPI call, an allocation). Every rank exits with\n"
    "the same code.";

// The text of a decimal integer in canonical form (leading zeros dropped), or the reason `value`
// is not one that fits an int64 (an unsigned flag: a uint64 that is not negative).
inline std::string canonical_decimal(std::string& value, bool is_unsigned) {
  if (value.empty()) return "an empty value is not a number";
  const std::size_t sign = value[0] == '-' || value[0] == '+' ? 1 : 0;
  if (sign == value.size() || value.find_first_not_of("0123456789", sign) != std::string::npos) {
    return "'" + value + "' is not a decimal integer";
  }
  if (is_unsigned && value[0] == '-' && value.find_first_not_of('0', 1) != std::string::npos) {
    return "'" + value + "' is negative; this flag takes a number >= 0";
  }
  std::string digits = value.substr(sign);
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  const bool negative = value[0] == '-' && digits != "0";
  // The largest magnitudes: 2^63 - 1 (2^63 negative), 2^64 - 1 unsigned; same-length texts of
  // digits compare as their numbers.
  const std::string limit = is_unsigned ? "18446744073709551615" : negative ? "9223372036854775808" : "9223372036854775807";
  if (digits.size() > limit.size() || (digits.size() == limit.size() && digits > limit)) {
    return "'" + value + "' is out of range (" + (negative ? "-" : "") + limit + " is the " +
           (negative ? "smallest" : "largest") + ")";
  }
  value = (negative ? "-" : "") + digits;
  return {};
}

// A check that refuses an empty value with `message` (CLI11 took one as the type's zero, or as the
// flag's default).
inline CLI::Validator refuse_empty(std::string message, std::string name) {
  return CLI::Validator([message](std::string& value) { return value.empty() ? message : std::string(); },
                        std::string(), std::move(name));
}

// CLI11 reads an integer with base detection (a leading 0 made it octal: --steps 010 trained 8
// steps, and 08 could not be converted), an empty value as 0, and a value past int64 as the largest;
// a uint64 took -1 as 2^64 - 1. Every integer flag of `app` takes a decimal integer instead: leading
// zeros are dropped, an empty value, another base and a value out of range are refused, naming it.
// An empty value of a float flag is refused too (CLI11 read it as 0).
inline void strict_numbers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (type == "INT" || type == "UINT") {
      const bool is_unsigned = type == "UINT";
      option->transform(CLI::Validator([is_unsigned](std::string& value) { return canonical_decimal(value, is_unsigned); },
                                       std::string(), "decimal"));
    } else if (type == "FLOAT") {
      option->check(refuse_empty("an empty value is not a number", "not_empty"));
    }
  }
  for (CLI::App* sub : app.get_subcommands({})) strict_numbers(*sub);
}

// For a flag that names a file or a directory: an empty value (an unset shell variable, say)
// would mean the flag's default, silently (--ckpt-dir '' saved no checkpoint, --data '' trained on
// the default corpus), and is refused.
inline CLI::Validator non_empty_path() { return refuse_empty("an empty value names no path", "non_empty_path"); }

// Parses the command line into `app`'s options, then returns run(rank), or the exit code of the
// error it raised (--help, --version: 0; CLI11 parse errors and tessera::Error: 2;
// tessera::IntegrityError: 3; anything else aborts the job with 1).
template <class Run>
int parse_and_run(const char* program, CLI::App& app, int argc, char** argv, Run&& run) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  app.set_version_flag("--version", std::string(program) + " (tessera " + std::string(version_string()) + ")");
  app.footer(kExitCodes);
  app.get_formatter()->column_width(34);  // room for "--measure-seconds FLOAT=0.5"
  strict_numbers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // The command line is the same on every rank: every rank gets here.
    if (rank == 0) app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  MPI_Comm agree = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &agree) != MPI_SUCCESS) {
    std::cerr << program << ": rank " << rank << ": MPI_Comm_dup failed\n";
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  try {
    if (fault_rank() == rank) throw Error("TESSERA_FAULT: error raised on rank " + std::to_string(rank) + " only");
    const int rc = run(rank);
    MPI_Comm_free(&agree);
    return rc;
  } catch (const Error& e) {
    // Exit codes: 3 a checkpoint that fails its integrity checks, 2 any other bad input.
    const int code = dynamic_cast<const IntegrityError*>(&e) != nullptr ? 3 : 2;
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
