// Logging through one pluggable sink. The runtime is silent by default: nothing is printed until an
// embedder installs a sink (e.g. tools/run installs one that writes to stderr).
//
//   set_log_sink([](LogLevel level, const char* message) { my_logger(level, message); });
//   ES_LOG(Info, "loaded %s", path);
//
// Thread-safety: log() may be called from any thread; set_log_sink() should be called once, early.

#ifndef EDGESHARE_RUNTIME_CORE_LOG_H_
#define EDGESHARE_RUNTIME_CORE_LOG_H_

#include <cstdint>

namespace edgeshare {
namespace runtime {

enum class LogLevel : uint8_t { Debug, Info, Warning, Error };

using LogSink = void (*)(LogLevel level, const char* message);

// Installs `sink` (null silences the runtime again).
void set_log_sink(LogSink sink);

// Formats and hands the message to the sink, if one is installed.
void log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace runtime
}  // namespace edgeshare

#define ES_LOG(level, ...) \
  ::edgeshare::runtime::log(::edgeshare::runtime::LogLevel::level, __VA_ARGS__)

#endif  // EDGESHARE_RUNTIME_CORE_LOG_H_
