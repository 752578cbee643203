#include "edgeshare/runtime/core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace edgeshare {
namespace runtime {
namespace {
std::atomic<LogSink> g_sink{nullptr};
}  // namespace

void set_log_sink(LogSink sink) { g_sink.store(sink, std::memory_order_release); }

void log(LogLevel level, const char* format, ...) {
  LogSink sink = g_sink.load(std::memory_order_acquire);
  if (sink == nullptr) return;
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  sink(level, buffer);
}

}  // namespace runtime
}  // namespace edgeshare
