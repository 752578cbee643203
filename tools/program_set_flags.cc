#include "edgeshare/tools/program_set_flags.h"

#include <cstdio>
#include <cstdlib>

#include "edgeshare/runtime/core/log.h"

namespace edgeshare {
namespace tools {

void add_program_set_flags(CLI::App& app, ProgramSetFlags& flags) {
  // allow_extra_args(false): one value per --program, as `--program a.pte --program b.pte`.
  app.add_option("--program", flags.programs, "a .pte to load; repeat for more")
      ->required()
      ->allow_extra_args(false);
  app.add_option("--data", flags.data_files, "a .ptd data file the programs load against")
      ->allow_extra_args(false);
  app.add_flag_callback(
      "--no-share", [&flags] { flags.share = false; }, "turn the weights cache's sharing off");
  app.add_flag_callback(
      "--no-verify", [&flags] { flags.verify = false; },
      "trust the data files: do not hash fetched bytes against their digests");
  app.add_option("--threads", flags.threads, "threads of the delegate's operators")
      ->check(CLI::Range(1, 1000000));
}

runtime::Status parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    return runtime::Status::Format(runtime::Error::InvalidArgument, "%s", e.what());
  }
  return runtime::Status();
}

namespace {

void LogToStderr(runtime::LogLevel level, const char* message) {
  if (level >= runtime::LogLevel::Warning) std::fprintf(stderr, "%s\n", message);
}

}  // namespace

int run_tool(CLI::App& app, int argc, char** argv, const std::function<runtime::Status()>& run) {
  runtime::set_log_sink(LogToStderr);
  const runtime::Status parsed = parse_flags(app, argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: error: %s\n%s", app.get_name().c_str(), parsed.message(),
                 app.help().c_str());
    return 1;
  }
  const runtime::Status status = run();
  if (!status.ok()) {
    // One line: the message names the file and what is wrong with it.
    std::fprintf(stderr, "%s: error: %s\n", app.get_name().c_str(), status.message());
    return 1;
  }
  return 0;
}

}  // namespace tools
}  // namespace edgeshare
