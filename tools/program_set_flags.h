// The command-line flags //tools:run and //bench:lora_runner share (--program, --data, --no-share,
// --no-verify, --threads), declared on a CLI11 app, and one parse call that turns CLI11's errors
// into a Status.
//
//   CLI::App app{"loads programs", "run"};
//   ProgramSetFlags flags;
//   add_program_set_flags(app, flags);
//   app.add_option("--iterations", iterations)->check(CLI::Range(1, 1000000));
//   Status parsed = parse_flags(app, argc, argv);        // --help prints and exits 0
//   if (!parsed.ok()) std::fprintf(stderr, "run: error: %s\n%s", parsed.message(),
//   app.help().c_str());
//
// Errors: InvalidArgument with CLI11's one-line message. Compiled with exceptions (CLI11 reports
// through them); none leaves parse_flags. The flags point into `flags`, which must outlive the app.
// Not thread-safe (CLI::App).

#ifndef EDGESHARE_TOOLS_PROGRAM_SET_FLAGS_H_
#define EDGESHARE_TOOLS_PROGRAM_SET_FLAGS_H_

#include <CLI/CLI.hpp>
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
  int threads = 1;                      // --threads N: threads of the delegate's operators.
};

void add_program_set_flags(CLI::App& app, ProgramSetFlags& flags);

// Parses argv into the app's flags. --help prints the usage and exits the process with status 0.
runtime::Status parse_flags(CLI::App& app, int argc, char** argv);

}  // namespace tools
}  // namespace edgeshare

#endif  // EDGESHARE_TOOLS_PROGRAM_SET_FLAGS_H_
