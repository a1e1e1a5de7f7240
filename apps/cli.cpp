#include "apps/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <utility>

#include "core/version.h"

namespace tessera::apps {
namespace {

// The footer of every program's --help (the README's "Exit codes" table says the same).
constexpr const char* kExitCodes =
    "Exit codes: 0 success; 2 bad input (a flag, spec, rule, mesh, shape or file refused before any work,\n"
    "or a training loss that is no longer finite); 3 a checkpoint that fails its integrity checks (corrupt,\n"
    "incomplete or truncated); 1 a runtime failure (an MPI call, an allocation). Every rank exits with\n"
    "the same code.";

// A check that refuses an empty value with `message` (CLI11 took one as the type's zero, or as the
// flag's default).
CLI::Validator refuse_empty(std::string message, std::string name) {
  return CLI::Validator([message](std::string& value) { return value.empty() ? message : std::string(); },
                        std::string(), std::move(name));
}

// CLI11 reads an integer with base detection (a leading 0 made it octal: --steps 010 trained 8
// steps, and 08 could not be converted), an empty value as 0, and a value past int64 as the largest;
// a uint64 took -1 as 2^64 - 1. Every integer option of `app` takes a decimal integer instead:
// leading zeros are dropped, an empty value, another base and a value out of range are refused,
// naming it. An empty value of a float option is refused too (CLI11 read it as 0).
void strict_numbers(CLI::App& app) {
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

}  // namespace

std::string canonical_decimal(std::string& value, bool is_unsigned) {
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

Option& Option::capture_default_str() {
  option_->capture_default_str();
  return *this;
}

Option& Option::one_of(const std::vector<std::string>& values) {
  option_->check(CLI::IsMember(values));
  return *this;
}

Option& Option::non_empty_path() {
  option_->check(refuse_empty("an empty value names no path", "non_empty_path"));
  return *this;
}

Option& Option::needs(const Option& other) {
  option_->needs(other.option_);
  return *this;
}

Option& Option::required() {
  option_->required();
  return *this;
}

CommandLine::CommandLine(const std::string& description)
    : owned_(std::make_unique<CLI::App>(description)), app_(owned_.get()) {}

CommandLine::CommandLine(CLI::App* subcommand) : app_(subcommand) {}

CommandLine::~CommandLine() = default;

Option CommandLine::add_option(const std::string& name, int& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

Option CommandLine::add_option(const std::string& name, std::int64_t& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

Option CommandLine::add_option(const std::string& name, std::uint64_t& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

Option CommandLine::add_option(const std::string& name, double& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

Option CommandLine::add_option(const std::string& name, std::string& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

Option CommandLine::add_option(const std::string& name, std::vector<std::string>& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

Option CommandLine::add_flag(const std::string& name, bool& value, const std::string& help) {
  return Option(app_->add_flag(name, value, help));
}

void CommandLine::take_last_of_repeats() { app_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast); }

CommandLine& CommandLine::add_subcommand(const std::string& name, const std::string& description) {
  subcommands_.push_back(std::unique_ptr<CommandLine>(new CommandLine(app_->add_subcommand(name, description))));
  return *subcommands_.back();
}

void CommandLine::require_subcommand(int count) { app_->require_subcommand(count); }

bool CommandLine::parsed() const { return app_->parsed(); }

int CommandLine::parse(const std::string& program, int argc, char** argv, int rank) {
  app_->set_version_flag("--version", program + " (tessera " + std::string(version_string()) + ")");
  app_->footer(kExitCodes);
  app_->get_formatter()->column_width(34);  // room for "--measure-seconds FLOAT=0.5"
  strict_numbers(*app_);
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) app_->exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  return -1;
}

}  // namespace tessera::apps
