#include "edgeshare/tools/program_set_flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include "edgeshare/runtime/core/log.h"
#include "edgeshare/tools/printable_text.h"

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
  app.add_option("--threads", flags.threads, "threads the programs' methods split work across")
      ->check(integer_in(1, 256));
}

CLI::Validator integer_in(long long min, long long max) {
  const std::string range = std::to_string(min) + ".." + std::to_string(max);
  return CLI::Validator(
      [min, max, range](std::string& value) -> std::string {
        const std::string shown = printable_text(value, 40);
        char* end = nullptr;
        errno = 0;
        const long long parsed = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || end == value.c_str() || *end != '\0' || errno == ERANGE) {
          return shown + " is not an integer";
        }
        if (parsed < min || parsed > max) return shown + " is not in " + range;
        return "";
      },
      "INT in " + range);
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

// `run` with every C++ exception (a bad_alloc, a JSON library's error) turned into a Status:
// none leaves a tool's main.
runtime::Status RunCatching(const std::function<runtime::Status()>& run) {
  try {
    return run();
  } catch (const std::bad_alloc&) {
    return runtime::Status::Format(runtime::Error::MemoryAllocationFailed, "out of memory");
  } catch (const std::exception& e) {
    return runtime::Status::Format(runtime::Error::Internal, "%s", e.what());
  } catch (...) {
    return runtime::Status::Format(runtime::Error::Internal, "an unknown C++ exception");
  }
}

int run_tool(CLI::App& app, int argc, char** argv, const std::function<runtime::Status()>& run) {
  runtime::set_log_sink(LogToStderr);
  const runtime::Status parsed = parse_flags(app, argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: error: %s (--help lists the flags)\n", app.get_name().c_str(),
                 printable_text(parsed.message()).c_str());
    return 1;
  }
  const runtime::Status status = RunCatching(run);
  if (!status.ok()) {
    // One line: the message names the file and what is wrong with it.
    std::fprintf(stderr, "%s: error: %s\n", app.get_name().c_str(),
                 printable_text(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace tools
}  // namespace edgeshare
