// The programs' command lines: CLI11 behind a small interface, compiled once (apps/cli.cpp).
//
// CLI11 is header-only, and a file that included it spent most of its compile there: demo_mesh.cpp
// took 9-10 s with GCC -O2, of which a file holding only the include and four options took 9 s.
// Seven programs paid it in each of the two builds of the test command. The programs name their
// options through CommandLine and Option; CLI11 parses, prints --help and words its errors exactly as
// before, since apps/cli.cpp makes the same CLI11 calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace tessera::apps {

// One option of a CommandLine; each call returns it again, to chain.
class Option {
 public:
  // --help shows the value the option holds before parsing as its default.
  Option& capture_default_str();
  // Refuses a value outside `values` ("--loss: foo not in {sum,mse,xent}").
  Option& one_of(const std::vector<std::string>& values);
  // Refuses an empty value ("--ckpt-dir: an empty value names no path"): for a flag that names a
  // file or a directory, an empty value (an unset shell variable, say) would mean the flag's
  // default in silence (--ckpt-dir '' saved no checkpoint, --data '' trained on the default corpus).
  Option& non_empty_path();
  // Refuses this option without `other` ("--rules requires --logical").
  Option& needs(const Option& other);
  // Refuses a command line without this option.
  Option& required();

 private:
  friend class CommandLine;
  explicit Option(CLI::Option* option) : option_(option) {}
  CLI::Option* option_;
};

// A program's options, or those of one of its subcommands.
class CommandLine {
 public:
  explicit CommandLine(const std::string& description);
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // An option that takes a value, read into `value` when given. Integers are decimal (leading zeros
  // dropped; an empty value, another base and a value out of the type's range refused, naming the
  // value), and an empty value of a float is refused too (CLI11 read it as 0).
  Option add_option(const std::string& name, int& value, const std::string& help);
  Option add_option(const std::string& name, std::int64_t& value, const std::string& help);
  Option add_option(const std::string& name, std::uint64_t& value, const std::string& help);
  Option add_option(const std::string& name, double& value, const std::string& help);
  Option add_option(const std::string& name, std::string& value, const std::string& help);
  Option add_option(const std::string& name, std::vector<std::string>& value, const std::string& help);
  // A flag without a value; "--a,!--no-a" names one that sets and one that clears.
  Option add_flag(const std::string& name, bool& value, const std::string& help);
  // An option given more than once takes its last value (otherwise a repeat is refused).
  void take_last_of_repeats();

  // A subcommand ("ckpt_tool list PATH"), owned by this command line.
  CommandLine& add_subcommand(const std::string& name, const std::string& description);
  // Refuses a command line that names fewer or more than `count` subcommands.
  void require_subcommand(int count);
  // Whether the parsed command line named this subcommand.
  bool parsed() const;

  // Parses the command line with what every program shares: --version (PROGRAM (tessera VERSION)),
  // the exit codes under --help, decimal integers. Returns -1 when the program goes on to run;
  // otherwise the exit code (0 after --help or --version, 2 after a refused command line), rank 0
  // having printed the help or the error. The command line is the same on every rank, so every
  // rank returns the same.
  int parse(const std::string& program, int argc, char** argv, int rank);

 private:
  explicit CommandLine(CLI::App* subcommand);
  std::unique_ptr<CLI::App> owned_;
  CLI::App* app_;
  std::vector<std::unique_ptr<CommandLine>> subcommands_;
};

// The text of a decimal integer in canonical form (leading zeros dropped), or the reason `value`
// is not one that fits an int64 (an unsigned flag: a uint64 that is not negative); empty when it is.
std::string canonical_decimal(std::string& value, bool is_unsigned);

}  // namespace tessera::apps
