#include "edgeshare/tools/adapter_swap.h"

#include <cstdint>
#include <string>

#include "edgeshare/runtime/core/scalar_type.h"

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

namespace {

// The element types of a map's entries, as names in enum order ("Float", "Char, Float"): an adapter
// stored with another --adapter-dtype has other ones (and other keys), which deserves its own
// message rather than "another structure".
std::string stored_types(const NamedDataMap& map) {
  uint64_t seen = 0;
  for (size_t i = 0; i < map.get_num_keys(); ++i) {
    Result<const char*> key = map.get_key(i);
    if (!key.ok()) continue;
    Result<runtime::TensorLayout> layout = map.get_tensor_layout(*key);
    const int type = layout.ok() ? static_cast<int>(layout->scalar_type) : -1;
    if (type >= 0 && type < 64) seen |= uint64_t{1} << type;
  }
  std::string names;
  for (int type = 0; type < 64; ++type) {
    if ((seen >> type & 1) == 0) continue;
    if (!names.empty()) names += ", ";
    names += runtime::to_string(static_cast<runtime::ScalarType>(type));
  }
  return names;
}

}  // namespace

Status check_same_adapter_keys(const NamedDataMap& adapter, const NamedDataMap& replaced,
                               const char* path, const std::string& program) {
  const std::string types = stored_types(adapter);
  const std::string replaced_types = stored_types(replaced);
  ES_CHECK_OR_RETURN_ERROR(types == replaced_types, Error::InvalidArgument,
                           "%s holds weights of type %s, the adapter it would replace (%s) of type "
                           "%s: every adapter of %s must be exported with the same --adapter-dtype",
                           path, types.c_str(), replaced.name(), replaced_types.c_str(),
                           program.c_str());
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

namespace {

// The first 6 bytes in hex: enough to tell two foundations apart in a message.
std::string short_hex(const runtime::Digest& digest) {
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < 6; ++i) {
    hex += kHex[digest.bytes[i] >> 4];
    hex += kHex[digest.bytes[i] & 15];
  }
  return hex;
}

// The foundation files among `files`: those that record no foundation of their own.
std::vector<const DataFile*> foundation_files(
    const std::vector<std::shared_ptr<const DataFile>>& files) {
  std::vector<const DataFile*> found;
  for (const std::shared_ptr<const DataFile>& file : files) {
    if (file != nullptr && file->foundation_digest() == nullptr) found.push_back(file.get());
  }
  return found;
}

const DataFile* with_identity(const std::vector<const DataFile*>& files,
                              const runtime::Digest& identity) {
  for (const DataFile* file : files) {
    if (file->identity() == identity) return file;
  }
  return nullptr;
}

}  // namespace

Status check_foundation(const runtime::Digest* program_foundation, const std::string& program,
                        const std::vector<std::shared_ptr<const DataFile>>& files) {
  const std::vector<const DataFile*> foundations = foundation_files(files);
  if (program_foundation != nullptr && !foundations.empty() &&
      with_identity(foundations, *program_foundation) == nullptr) {
    return Status::Format(Error::InvalidArgument,
                          "%s was exported for foundation %s, but it is loaded over %s, which is "
                          "foundation %s: export the program over the foundation you load",
                          program.c_str(), short_hex(*program_foundation).c_str(),
                          foundations.front()->path(),
                          short_hex(foundations.front()->identity()).c_str());
  }
  for (const std::shared_ptr<const DataFile>& file : files) {
    if (file != nullptr && file->foundation_digest() != nullptr) {
      ES_RETURN_IF_ERROR(check_adapter_foundation(*file, program_foundation, program, files));
    }
  }
  return Status();
}

Status check_adapter_foundation(const DataFile& adapter, const runtime::Digest* program_foundation,
                                const std::string& program,
                                const std::vector<std::shared_ptr<const DataFile>>& files) {
  const runtime::Digest* wanted = adapter.foundation_digest();
  if (wanted == nullptr) return Status();
  const std::vector<const DataFile*> foundations = foundation_files(files);
  if (program_foundation != nullptr) {
    if (*wanted == *program_foundation) return Status();
    const DataFile* loaded = with_identity(foundations, *program_foundation);
    return Status::Format(Error::InvalidArgument,
                          "%s was exported for foundation %s, but %s runs over foundation %s "
                          "(%s): an adapter binds only over the foundation it was exported for",
                          adapter.path(), short_hex(*wanted).c_str(), program.c_str(),
                          short_hex(*program_foundation).c_str(),
                          loaded != nullptr ? loaded->path() : "as the program records it");
  }
  if (foundations.empty() || with_identity(foundations, *wanted) != nullptr) return Status();
  return Status::Format(Error::InvalidArgument,
                        "%s was exported for foundation %s, but %s runs over %s, which is "
                        "foundation %s: an adapter binds only over the foundation it was exported "
                        "for",
                        adapter.path(), short_hex(*wanted).c_str(), program.c_str(),
                        foundations.front()->path(),
                        short_hex(foundations.front()->identity()).c_str());
}

}  // namespace tools
}  // namespace edgeshare
