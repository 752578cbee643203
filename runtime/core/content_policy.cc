#include "edgeshare/runtime/core/content_policy.h"

#include <atomic>

namespace edgeshare {
namespace runtime {
namespace {

std::atomic<bool> g_share_constants{true};
std::atomic<bool> g_verify_content{true};

}  // namespace

void set_share_constants(bool enabled) { g_share_constants.store(enabled); }

bool share_constants_enabled() { return g_share_constants.load(); }

void set_verify_content(bool enabled) { g_verify_content.store(enabled); }

bool verify_content_enabled() { return g_verify_content.load(); }

}  // namespace runtime
}  // namespace edgeshare
