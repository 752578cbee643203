// The command-line flags //tools:run and //bench:lora_runner share (--program, --data, --no-share,
// --no-verify, --threads), declared on a CLI11 app, one parse call that turns CLI11's errors
// into a Status, and the main() every such tool has (run_tool).
//
//   CLI::App app{"loads programs", "run"};
//   ProgramSetFlags flags;
//   add_program_set_flags(app, flags);
//   app.add_option("--iterations", iterations)->check(CLI::Range(1, 1000000));
//   return run_tool(app, argc, argv, [&] { return Run(flags, iterations); });
//
// Errors: InvalidArgument with CLI11's one-line message. Compiled with exceptions (CLI11 reports
// through them); none leaves parse_flags. The flags point into `flags`, which must outlive the app.
// Not thread-safe (CLI::App).

#ifndef EDGESHARE_TOOLS_PROGRAM_SET_FLAGS_H_
#define EDGESHARE_TOOLS_PROGRAM_SET_FLAGS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace tools {

struct ProgramSetFlags {
  std::vector<std::string> programs;    // --program, repeated: loaded in this order. Required.
  std::vector<std::string> data_files;  // --data, repeated: the .ptd files they load against.
  bool share = true;                    // --no-share turns the weights cache's sharing off.
  bool verify = true;                   // --no-verify: trusted files, fetched bytes not hashed.
  int threads = 1;                      // --threads N: the program set's Threads.
};

void add_program_set_flags(CLI::App& app, ProgramSetFlags& flags);

// A check for an integer flag: the whole value is a decimal integer in [min, max] ("3.7" and "1e3"
// are refused with "3.7 is not an integer", not read as a truncated or a floating-point number).
CLI::Validator integer_in(long long min, long long max);

// Parses argv into the app's flags. --help prints the usage and exits the process with status 0.
runtime::Status parse_flags(CLI::App& app, int argc, char** argv);

// A tool's main once its flags are declared on `app`: the runtime's warnings and errors go to
// stderr, argv is parsed (a usage error prints "NAME: error: MESSAGE" and the help), then `run`
// runs; its error is one "NAME: error: MESSAGE" line (NAME: the app's name). Returns the exit
// status: 0, or 1 on any error.
int run_tool(CLI::App& app, int argc, char** argv, const std::function<runtime::Status()>& run);

}  // namespace tools
}  // namespace edgeshare

#endif  // EDGESHARE_TOOLS_PROGRAM_SET_FLAGS_H_
