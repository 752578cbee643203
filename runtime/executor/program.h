// Program: a verified, indexed .pte file, from which methods are loaded.
//
// load() checks the header, verifies the flatbuffer (FlatBuffers verifier), the format version and
// every segment and named-data entry against the file size before anything else is read. Methods
// are loaded by name with the NamedDataMap that holds their external constants (e.g. the
// foundation.ptd of a LoRA program); a key missing there is an error naming the key and the files.
//
//   ES_ASSIGN_OR_RETURN(FileDataLoader loader, FileDataLoader::from("lora_a.pte"));
//   ES_ASSIGN_OR_RETURN(Program program, Program::load(&loader));
//   ES_ASSIGN_OR_RETURN(auto foundation, DataFile::open("foundation.ptd"));
//   ES_ASSIGN_OR_RETURN(Method forward, program.load_method("forward", &foundation->map()));
//
// Errors: InvalidProgram naming the file and field; NotFound for an unknown method; loader errors.
// Thread-safety: all methods are const and may be called concurrently.
// Ownership: borrows the loader (and load_method's external map), which must outlive the Program
// and every Method loaded from it. The verified flatbuffer and the program's own named data, which
// Methods point into, are shared (reference-counted) with every Method loaded from it: a Method
// may outlive its Program. A Program may be moved; its Methods stay valid.

#ifndef EDGESHARE_RUNTIME_EXECUTOR_PROGRAM_H_
#define EDGESHARE_RUNTIME_EXECUTOR_PROGRAM_H_

#include <cstddef>
#include <memory>

#include "edgeshare/runtime/core/data_loader.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/executor/method.h"

namespace edgeshare {
namespace runtime {

class ProgramImage;

class Program {
 public:
  static Result<Program> load(const DataLoader* loader);

  Program(Program&&) noexcept;
  Program& operator=(Program&&) noexcept;
  ~Program();

  size_t num_methods() const;
  // Errors: OutOfRange.
  Result<const char*> get_method_name(size_t index) const;

  // Loads method `name`; `external_data` (may be null) resolves its external constants and is
  // merged with the program's own named data for its delegates. The load and every execute of
  // the Method run under `threads` (runtime/core/threads.h: its kernels and delegates split their
  // work across them), which must outlive the Method; null: under whatever Threads is current on
  // the calling thread (none: that thread alone). Errors: InvalidArgument for a null name;
  // NotFound for an unknown method; otherwise Method::load's errors, whose messages start
  // "failed to load method '<name>' from <file>".
  Result<Method> load_method(const char* name, const NamedDataMap* external_data = nullptr,
                             const Threads* threads = nullptr) const;

  // The program's own named data, or null when the .pte has none.
  const NamedDataMap* named_data() const;

  // The identity of the foundation data file the program was exported over (SHA-256 over the
  // digests of its entries in key order; DataFile::identity() of that file), or null when the file
  // records none. Points into the Program: valid while it lives.
  const Digest* foundation_digest() const;

  // The file name, for messages.
  const char* name() const;

 private:
  explicit Program(std::shared_ptr<const ProgramImage> image);
  // Shared with each Method loaded from this Program, which points into it.
  std::shared_ptr<const ProgramImage> image_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_EXECUTOR_PROGRAM_H_
