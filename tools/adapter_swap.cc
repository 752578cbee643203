#include "edgeshare/tools/adapter_swap.h"

namespace edgeshare {
namespace tools {

using runtime::DataFile;
using runtime::Error;
using runtime::NamedDataMap;
using runtime::Result;
using runtime::Status;

Result<const NamedDataMap*> replaced_adapter(
    const DataFile& adapter, const DataFile* bound,
    const std::vector<std::shared_ptr<const DataFile>>& loaded_with, const std::string& program) {
  if (bound != nullptr) return &bound->map();
  const NamedDataMap& map = adapter.map();
  ES_CHECK_OR_RETURN_ERROR(map.get_num_keys() > 0, Error::InvalidArgument, "%s holds no weights",
                           adapter.path());
  for (size_t i = 0; i < map.get_num_keys(); ++i) {
    ES_ASSIGN_OR_RETURN(const char* key, map.get_key(i));
    for (const std::shared_ptr<const DataFile>& file : loaded_with) {
      if (file != nullptr && file->map().get_digest(key).ok()) return &file->map();
    }
  }
  ES_ASSIGN_OR_RETURN(const char* first, map.get_key(0));
  return Status::Format(Error::InvalidArgument,
                        "%s is no adapter of %s: none of the data files it was loaded with holds "
                        "any of its keys ('%s', ...): an adapter of another structure (adapted "
                        "modules or rank) needs its own program",
                        adapter.path(), program.c_str(), first);
}

Status check_same_adapter_keys(const NamedDataMap& adapter, const NamedDataMap& replaced,
                               const char* path, const std::string& program) {
  for (size_t i = 0; i < adapter.get_num_keys(); ++i) {
    ES_ASSIGN_OR_RETURN(const char* key, adapter.get_key(i));
    ES_CHECK_OR_RETURN_ERROR(
        replaced.get_digest(key).ok(), Error::InvalidArgument,
        "%s holds '%s', which the adapter it would replace (%s) lacks: it is "
        "no adapter of %s (a foundation's data file, or an adapter of another "
        "structure: other adapted modules or rank, which needs its own program)",
        path, key, replaced.name(), program.c_str());
  }
  ES_CHECK_OR_RETURN_ERROR(
      adapter.get_num_keys() == replaced.get_num_keys(), Error::InvalidArgument,
      "%s holds %zu weights, the adapter it would replace (%s) %zu: it is no "
      "adapter of %s (an adapter of another structure: other adapted modules "
      "or rank, which needs its own program)",
      path, adapter.get_num_keys(), replaced.name(), replaced.get_num_keys(), program.c_str());
  return Status();
}

}  // namespace tools
}  // namespace edgeshare
