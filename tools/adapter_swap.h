// Adapter swap checks shared by //tools:run --swap-adapter and the Python runtime's bind_adapter:
// which loaded data file a new adapter .ptd replaces, and whether it has the same structure (the
// same keys; Method::rebind_data checks each key's dtype and shape, and refuses a file lacking
// some of its open keys). These checks name the file it replaces and refuse extra keys too, so an
// adapter of another structure fails before any method is touched.
//
//   ES_ASSIGN_OR_RETURN(const NamedDataMap* old, replaced_adapter(*code, bound, loaded_with,
//   "lora.pte")); ES_RETURN_IF_ERROR(check_same_adapter_keys(code->map(), *old, code->path(),
//   "lora.pte")); ES_RETURN_IF_ERROR(method.rebind_data(code->map()));
//
// Pure functions over borrowed maps: no ownership, thread-safe as the maps are. Errors:
// InvalidArgument naming the file and the key at fault.

#ifndef EDGESHARE_TOOLS_ADAPTER_SWAP_H_
#define EDGESHARE_TOOLS_ADAPTER_SWAP_H_

#include <memory>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/named_data/data_file.h"

namespace edgeshare {
namespace tools {

// The map `adapter` would replace: `bound` (the adapter bound last) when not null, else the one of
// `loaded_with` (the files the program was loaded over) that holds one of adapter's keys.
runtime::Result<const runtime::NamedDataMap*> replaced_adapter(
    const runtime::DataFile& adapter, const runtime::DataFile* bound,
    const std::vector<std::shared_ptr<const runtime::DataFile>>& loaded_with,
    const std::string& program);

// InvalidArgument unless `adapter` holds exactly the keys of `replaced`, in the same element types
// (an adapter stored with another --adapter-dtype is named as such).
runtime::Status check_same_adapter_keys(const runtime::NamedDataMap& adapter,
                                        const runtime::NamedDataMap& replaced, const char* path,
                                        const std::string& program);

// Foundation identity (DataFile::identity(); Program::foundation_digest() and
// DataFile::foundation_digest() record the one a file was exported for). A file that records none
// (written before files recorded it) is not checked; neither is a program loaded over no
// foundation file (its method load names the keys it misses).
//
// InvalidArgument, naming both foundations, when `program_foundation` (may be null) is not the
// identity of any of `files` that records no foundation of its own, or when one of `files` is an
// adapter exported for another foundation than the program's (for a program that records none:
// than the foundation files among `files`).
runtime::Status check_foundation(const runtime::Digest* program_foundation,
                                 const std::string& program,
                                 const std::vector<std::shared_ptr<const runtime::DataFile>>& files);

// InvalidArgument, naming both foundations, when `adapter` was exported for another foundation than
// the one `program` runs over (check_foundation's rule for one more adapter file).
runtime::Status check_adapter_foundation(
    const runtime::DataFile& adapter, const runtime::Digest* program_foundation,
    const std::string& program, const std::vector<std::shared_ptr<const runtime::DataFile>>& files);

}  // namespace tools
}  // namespace edgeshare

#endif  // EDGESHARE_TOOLS_ADAPTER_SWAP_H_
