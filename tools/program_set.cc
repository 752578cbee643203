#include "edgeshare/tools/program_set.h"

#include <cstdlib>
#include <utility>

#include "edgeshare/tools/adapter_swap.h"

namespace edgeshare {
namespace tools {

using runtime::DataFile;
using runtime::Error;
using runtime::MergedDataMap;
using runtime::Method;
using runtime::MmapDataLoader;
using runtime::Program;
using runtime::Result;
using runtime::Status;
using runtime::Tensor;

std::string program_name(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

Status check_unique_program_names(const std::vector<std::string>& paths, const char* flag) {
  std::map<std::string, const std::string*> seen;
  for (const std::string& path : paths) {
    auto [it, inserted] = seen.emplace(program_name(path), &path);
    ES_CHECK_OR_RETURN_ERROR(inserted, Error::InvalidArgument,
                             "--program %s and --program %s are both named '%s'; %s keys programs "
                             "by file name (rename or copy one)",
                             it->second->c_str(), path.c_str(), it->first.c_str(), flag);
  }
  return Status();
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::milli>(elapsed).count();
}

Result<ProgramSet> ProgramSet::open(const std::vector<std::string>& data_files,
                                   size_t threads) {
  const auto start = std::chrono::steady_clock::now();
  ProgramSet set;
  ES_ASSIGN_OR_RETURN(runtime::Threads made, runtime::Threads::create(threads));
  set.threads_ = std::make_unique<runtime::Threads>(std::move(made));
  std::vector<const runtime::NamedDataMap*> maps;
  for (const std::string& path : data_files) {
    ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> file, DataFile::open(path.c_str()));
    maps.push_back(&file->map());
    set.data_files_.push_back(std::move(file));
  }
  if (!maps.empty()) {
    ES_ASSIGN_OR_RETURN(MergedDataMap merged, MergedDataMap::create(maps));
    set.external_ = std::make_unique<MergedDataMap>(std::move(merged));
    set.counted_ = std::make_unique<CountingDataMap>(*set.external_);
  }
  set.data_open_ms_ = milliseconds_since(start);
  return set;
}

Status ProgramSet::add(const std::string& path, const std::string& only_method) {
  const auto start = std::chrono::steady_clock::now();
  LoadedProgram entry;
  entry.path = path;
  entry.name = program_name(path);
  ES_ASSIGN_OR_RETURN(MmapDataLoader loader, MmapDataLoader::from(path.c_str()));
  entry.loader = std::make_unique<MmapDataLoader>(std::move(loader));
  ES_ASSIGN_OR_RETURN(Program program, Program::load(entry.loader.get()));
  entry.program = std::make_unique<Program>(std::move(program));
  ES_RETURN_IF_ERROR(check_foundation(entry.program->foundation_digest(), path, data_files_));
  std::string available;
  for (size_t m = 0; m < entry.program->num_methods(); ++m) {
    ES_ASSIGN_OR_RETURN(const char* method_name, entry.program->get_method_name(m));
    available += (available.empty() ? "" : ", ") + std::string(method_name);
    if (!only_method.empty() && only_method != method_name) continue;
    ES_ASSIGN_OR_RETURN(Method method,
                        entry.program->load_method(method_name, counted_.get(), threads_.get()));
    entry.methods.push_back(std::move(method));
  }
  ES_CHECK_OR_RETURN_ERROR(!entry.methods.empty() || only_method.empty(), Error::InvalidArgument,
                           "%s has no method '%s' (methods: %s)", path.c_str(), only_method.c_str(),
                           available.c_str());
  entry.load_ms = milliseconds_since(start);
  programs_.push_back(std::move(entry));
  return Status();
}

Result<bool> ProgramSet::bind_adapter(size_t index, const DataFile& adapter,
                                      const runtime::NamedDataMap& map) {
  ES_CHECK_OR_RETURN_ERROR(index < programs_.size(), Error::OutOfRange, "program %zu of %zu loaded",
                           index, programs_.size());
  LoadedProgram& entry = programs_[index];
  ES_ASSIGN_OR_RETURN(const runtime::NamedDataMap* replaced,
                      replaced_adapter(adapter, entry.bound_adapter, data_files_, entry.path));
  ES_RETURN_IF_ERROR(check_same_adapter_keys(adapter.map(), *replaced, adapter.path(), entry.path));
  ES_RETURN_IF_ERROR(check_adapter_foundation(adapter, entry.program->foundation_digest(),
                                              entry.path, data_files_));
  bool any = false;
  for (Method& method : entry.methods) {
    const Status status = method.rebind_data(map);
    if (status.code() == Error::NotFound) continue;  // This method reads none of its keys.
    ES_RETURN_IF_ERROR(status);
    any = true;
  }
  if (any) entry.bound_adapter = &adapter;
  return any;
}

std::map<std::string, size_t> ProgramSet::data_map_fetches() const {
  return counted_ == nullptr ? std::map<std::string, size_t>{} : counted_->fetches();
}

void ProgramSet::clear() {
  programs_.clear();
  counted_.reset();
  external_.reset();
  data_files_.clear();
}

void fill_seeded(Tensor& t, uint32_t seed) {
  uint64_t state = 0x9E3779B97F4A7C15ull ^ seed;
  float* data = t.data<float>();
  for (size_t i = 0; i < t.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = static_cast<float>((state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
  }
}

Status seed_inputs(Method& method, std::vector<NpyArray>& given, const std::string& program_name) {
  for (size_t i = 0; i < method.num_inputs(); ++i) {
    ES_ASSIGN_OR_RETURN(Tensor slot, method.input(i));
    if (i < given.size()) {
      ES_RETURN_IF_ERROR(method.set_input(i, given[i].tensor()));
      continue;
    }
    ES_CHECK_OR_RETURN_ERROR(slot.scalar_type() == runtime::ScalarType::Float, Error::NotSupported,
                             "input %zu of %s.%s is not float; give it with --inputs", i,
                             program_name.c_str(), method.name());
    fill_seeded(slot, static_cast<uint32_t>(i));
  }
  return Status();
}

Result<std::vector<double>> time_method(Method& method, int warmup, int iterations) {
  for (int it = 0; it < warmup; ++it) ES_RETURN_IF_ERROR(method.execute());
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(iterations));
  for (int it = 0; it < iterations; ++it) {
    const auto start = std::chrono::steady_clock::now();
    ES_RETURN_IF_ERROR(method.execute());
    samples.push_back(milliseconds_since(start));
  }
  return samples;
}

nlohmann::json weights_cache_json(const xnnpack::WeightsCacheStats& stats) {
  return {
      {"packs", stats.packs},
      {"cache_hits", stats.cache_hits},
      {"bytes_fetched", stats.bytes_fetched},
      {"packed_entries", stats.num_packed_entries},
  };
}

nlohmann::json external_constants_json(const runtime::ExternalConstantStats& stats) {
  return {
      {"fetches", stats.fetches},
      {"shared_hits", stats.shared_hits},
      {"verifications", stats.verifications},
      {"bytes_verified", stats.bytes_verified},
      {"verification_failures", stats.verification_failures},
      {"verifications_remembered", stats.verifications_remembered},
      {"live_entries", stats.live_entries},
  };
}

std::string user_path(const std::string& path) {
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || dir == nullptr) return path;
  return std::string(dir) + "/" + path;
}

}  // namespace tools
}  // namespace edgeshare
