#include "edgeshare/runtime/backend/backend.h"

#include "edgeshare/runtime/registry/name_registry.h"

namespace edgeshare {
namespace runtime {
namespace {

using BackendRegistry = NameRegistry<const BackendInterface*, 16, 64>;

BackendRegistry& registry() {
  static BackendRegistry* r = new BackendRegistry("backend");  // Never destroyed.
  return *r;
}

}  // namespace

Status register_backend(const char* name, const BackendInterface* backend) {
  return registry().add(name, backend);
}

const BackendInterface* get_backend(const char* name) { return registry().find(name); }

}  // namespace runtime
}  // namespace edgeshare
