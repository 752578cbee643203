#include "edgeshare/runtime/executor/external_constants.h"

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "edgeshare/runtime/core/content_policy.h"
#include "edgeshare/runtime/core/sha256.h"

namespace edgeshare {
namespace runtime {
namespace {

// What makes two views interchangeable: the same key of the same map with the same recorded
// digest, and whether the bytes were checked.
struct Identity {
  const NamedDataMap* map;
  std::string key;
  Digest digest;
  bool verified;

  bool operator<(const Identity& other) const {
    return std::tie(map, key, digest.bytes, verified) <
           std::tie(other.map, other.key, other.digest.bytes, other.verified);
  }
};

}  // namespace

struct ExternalConstant::Entry {
  Identity identity;
  FreeableBuffer bytes;
  size_t holders = 0;
};

namespace {

// Leaked on purpose: Methods in static storage may release entries during exit.
struct Table {
  std::mutex mutex;  // Guards everything below.
  std::map<Identity, ExternalConstant::Entry*> entries;
  ExternalConstantStats counters;
};

Table& table() {
  static Table* t = new Table();
  return *t;
}

// The map's memo covers its own digest only: a caller expecting another digest (a program pinning
// other bytes) is always hashed, and fails.
bool remembered_as_checked(const NamedDataMap& map, const char* key, const Digest& digest) {
  if (!map.content_verified(key)) return false;
  const Result<Digest> own = map.get_digest(key);
  return own.ok() && *own == digest;
}

void remember_checked(const NamedDataMap& map, const char* key, const Digest& digest) {
  const Result<Digest> own = map.get_digest(key);
  if (own.ok() && *own == digest) map.set_content_verified(key);
}

}  // namespace

// With sharing on, a held view is reused; a checked one serves unchecked loads too, never the
// reverse. Fetching and hashing happen outside the lock; two first loads racing both fetch, and the
// later one adopts the entry the earlier one published.
Result<ExternalConstant> ExternalConstant::acquire(const NamedDataMap& map, const char* key,
                                                   const Digest& digest, size_t nbytes) {
  const bool share = share_constants_enabled();
  const bool verify = verify_content_enabled();
  Table& t = table();
  auto find_locked = [&]() -> Entry* {
    for (bool checked : {true, false}) {
      if (!checked && verify) break;
      auto it = t.entries.find(Identity{&map, key, digest, checked});
      if (it != t.entries.end()) return it->second;
    }
    return nullptr;
  };
  if (share) {
    std::lock_guard<std::mutex> lock(t.mutex);
    if (Entry* hit = find_locked()) {
      ++hit->holders;
      ++t.counters.shared_hits;
      return ExternalConstant(hit);
    }
  }
  Result<FreeableBuffer> fetched = map.get_data(key);
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    ++t.counters.fetches;
  }
  if (!fetched.ok()) return fetched.status();
  FreeableBuffer bytes = std::move(*fetched);
  ES_CHECK_OR_RETURN_ERROR(bytes.size() == nbytes, Error::InvalidData,
                           "constant '%s' in %s has %zu bytes, expected %zu", key, map.name(),
                           bytes.size(), nbytes);
  // The memo is a shared check: with sharing off every Method hashes its own view.
  if (verify && share && remembered_as_checked(map, key, digest)) {
    std::lock_guard<std::mutex> lock(t.mutex);
    ++t.counters.verifications_remembered;
  } else if (verify) {
    const Status checked = check_sha256(bytes.data(), bytes.size(), digest);
    {
      std::lock_guard<std::mutex> lock(t.mutex);
      ++t.counters.verifications;
      t.counters.bytes_verified += bytes.size();
      if (!checked.ok()) ++t.counters.verification_failures;
    }
    if (!checked.ok()) return checked.WithContext("constant '%s' in %s", key, map.name());
    if (share) remember_checked(map, key, digest);
    // Hashing made every page resident; runs of the portable kernels that read the constant in
    // place (an embedding's gather) touch only the rows they need.
    bytes.release_resident_pages();
  }
  if (!share) return ExternalConstant(std::move(bytes));
  std::lock_guard<std::mutex> lock(t.mutex);
  Entry* entry = find_locked();
  if (entry == nullptr) {
    entry = new Entry{Identity{&map, key, digest, verify}, std::move(bytes), 0};
    t.entries.emplace(entry->identity, entry);
  }
  ++entry->holders;
  return ExternalConstant(entry);
}

ExternalConstant ExternalConstant::find_shared(const char* key, const Digest& digest,
                                               bool verified) {
  if (!share_constants_enabled()) return ExternalConstant();
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (auto& [identity, entry] : t.entries) {
    if (identity.key == key && identity.digest == digest && (identity.verified || !verified)) {
      ++entry->holders;
      ++t.counters.shared_hits;
      return ExternalConstant(entry);
    }
  }
  return ExternalConstant();
}

ExternalConstant::ExternalConstant(ExternalConstant&& other) noexcept
    : shared_(std::exchange(other.shared_, nullptr)), own_(std::move(other.own_)) {}

ExternalConstant& ExternalConstant::operator=(ExternalConstant&& other) noexcept {
  if (this != &other) {
    release();
    shared_ = std::exchange(other.shared_, nullptr);
    own_ = std::move(other.own_);
  }
  return *this;
}

const void* ExternalConstant::data() const {
  return shared_ != nullptr ? shared_->bytes.data() : own_.data();
}

// The last holder erases the entry; its bytes are given back outside the lock.
void ExternalConstant::release() {
  own_.free();
  Entry* entry = std::exchange(shared_, nullptr);
  if (entry == nullptr) return;
  Table& t = table();
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    if (--entry->holders > 0) return;
    t.entries.erase(entry->identity);
  }
  delete entry;
}

ExternalConstantStats external_constant_stats() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  ExternalConstantStats stats = t.counters;
  stats.live_entries = t.entries.size();
  return stats;
}

void reset_external_constant_stats() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.counters = ExternalConstantStats{};
}

Status check_external_layout(const NamedDataMap& map, const char* key, ScalarType type,
                             Span<const int32_t> sizes, const char* reader) {
  Result<TensorLayout> layout = map.get_tensor_layout(key);
  ES_CHECK_OR_RETURN_ERROR(layout.ok(), layout.error(), "constant '%s': %s", key,
                           layout.status().message());
  bool same = layout->scalar_type == type && layout->sizes.size() == sizes.size();
  for (size_t d = 0; same && d < sizes.size(); ++d) same = layout->sizes[d] == sizes[d];
  ES_CHECK_OR_RETURN_ERROR(same, Error::InvalidData,
                           "constant '%s' in %s does not have the dtype and shape %s expects", key,
                           map.name(), reader);
  // Tensors here are contiguous: a data file laying the bytes out in another dim order would be
  // read as the wrong numbers.
  for (size_t d = 0; d < layout->dim_order.size(); ++d) {
    ES_CHECK_OR_RETURN_ERROR(layout->dim_order[d] == d, Error::InvalidData,
                             "constant '%s' in %s has dim order position %zu = %u; %s reads it "
                             "contiguous (0, 1, ..., rank-1)",
                             key, map.name(), d, static_cast<unsigned>(layout->dim_order[d]),
                             reader);
  }
  return Status();
}

}  // namespace runtime
}  // namespace edgeshare
