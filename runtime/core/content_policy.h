// Content policy: two process-wide switches for constants read from data files (.ptd), honoured by
// the executor (external constants of non-delegated kernels) and by the XNNPACK delegate's weights
// cache alike, so neither depends on the other.
//
// Sharing (on by default): one copy of a constant per process. The executor hands every Method the
// same zero-copy view of an external constant (fetched from the data map once, while some Method
// holds it); the delegate packs a foundation weight once for every program. Off: each Method (and
// each delegate handle) made afterwards fetches its own.
//
// Content verification (on by default): fetched bytes are hashed (SHA-256) and must equal the
// digest recorded for them at export before anything uses them, so a data file whose bytes were
// changed under their digests fails to load (InvalidData naming the key and file) instead of
// running. An identity is hashed once while it stays shared, so only first loads pay: SHA-256 runs
// at 1.2-1.9 GB/s per core here. Off is the trusted-file mode: bytes fetched while it is off are
// used unchecked and are never handed to a load made while it is on (that load fetches and checks
// its own), so switching it off around trusted files cannot leak unchecked bytes into later checked
// loads. The program's recorded identity of an external constant (its digest, checked against the
// data file's) is cheap and is checked either way.
//
//   edgeshare::runtime::set_verify_content(false);   // only for files you trust
//   ... Program::load / load_method ...
//   edgeshare::runtime::set_verify_content(true);
//
// The XNNPACK delegate's weight_sharing.h (set_weight_sharing, set_verify_content) forwards here.
// Errors: none; these calls cannot fail. Thread-safety: any thread, any time; a load reads each
// switch once when it starts fetching a constant. Ownership: nothing is held.

#ifndef EDGESHARE_RUNTIME_CORE_CONTENT_POLICY_H_
#define EDGESHARE_RUNTIME_CORE_CONTENT_POLICY_H_

namespace edgeshare {
namespace runtime {

// Turns process-wide sharing of constants on (default) or off, for loads made from now on.
void set_share_constants(bool enabled);
bool share_constants_enabled();

// Turns content verification on (default) or off, for fetches made from now on.
void set_verify_content(bool enabled);
bool verify_content_enabled();

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_CONTENT_POLICY_H_
