// AdapterTables: the adapter tables of a batch program, held in memory the engine owns, so that
// adapters are put into and taken out of slots while the program runs.
//
// A batch program (exir's export_hf_batch) reads, per adapted Linear layer, two open constants:
// `<key>.lora_a` [adapter_slots, rank, in] and `<key>.lora_b` [adapter_slots, rank, out], LoRA's B
// transposed (float32, float16 for half the bytes, or int8 with a float32 scale per row of A and
// per output of B in `<key>.lora_a_scales` [adapter_slots, rank] and `<key>.lora_b_scales`
// [adapter_slots, out]; the LoRA scale folded into b). export_hf_batch writes them with its
// adapters in the first slots (batch_tables.ptd), and each adapter alone as a file of the same
// keys, shaped as LoRA's factors are, [r, in] and [out, r] for its own rank r <= rank, int8's
// scales [r] and [out] (<adapter>.ptd, recording the foundation it was exported for); load() writes
// B transposed. AdapterTables copies the tables once and is the NamedDataMap a
// batch method is loaded over (merged with the foundation's file): the method then reads this
// memory in place, and load() / clear() rewrite one slot's rows of every table. Nothing of the
// foundation is touched.
//
//   ES_ASSIGN_OR_RETURN(auto tables, AdapterTables::create(batch_tables->map(),
//   program.foundation_digest())); ES_ASSIGN_OR_RETURN(MergedDataMap data,
//   MergedDataMap::create({&foundation->map(), tables.get()}));
//   ... program.load_method("forward_batch", &data) ...
//   ES_RETURN_IF_ERROR(tables->load(/*slot=*/3, *DataFile::open("chat.ptd")));
//
// Errors: create: InvalidProgram for an entry that is not a float32, float16 or int8 [slots, rows,
// cols] table or a float32 [slots, rows] scales table, a key that ends in none of ".lora_a",
// ".lora_b", ".lora_a_scales", ".lora_b_scales", factors of two element types or of different slot
// counts, int8 factors without their scales or scales without int8 factors. load: OutOfRange for a
// slot past the tables; InvalidArgument for an adapter file of another foundation (naming both), a
// key the tables lack, a factor or scales of another dtype or shape (naming the key), a rank above
// the tables', or an int8 factor without its scales; nothing is written unless every check passes.
// Thread-safety: the map's methods from any thread. load() and clear() must not overlap a run that
// reads the same slot (the batch engine only rewrites slots no request uses); runs reading other
// slots may go on, as the bytes written are theirs alone.
// Ownership: owns its tables (64-byte aligned, in one region); borrows nothing after create().
// Views from get_data() stay valid while the object lives.

#ifndef EDGESHARE_GENERATION_ADAPTER_TABLES_H_
#define EDGESHARE_GENERATION_ADAPTER_TABLES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/named_data/data_file.h"

namespace edgeshare {
namespace generation {

class AdapterTables final : public runtime::NamedDataMap {
 public:
  // `foundation`: the batch program's foundation identity (Program::foundation_digest()), which
  // every loaded adapter file must record; null accepts files of any foundation.
  static runtime::Result<std::unique_ptr<AdapterTables>> create(
      const runtime::NamedDataMap& initial, const runtime::Digest* foundation);

  size_t slots() const { return slots_; }
  size_t rank() const { return rank_; }
  // Float, Half or Char (int8): every factor table's element type, and the adapter files' it loads
  // (the scales of int8 factors are Float).
  runtime::ScalarType dtype() const { return dtype_; }
  // Writes the adapter file's factors into `slot` (layers it does not adapt become zeros).
  runtime::Status load(size_t slot, const runtime::DataFile& adapter);
  // Zeroes `slot` (a run on it then adds nothing to the foundation).
  runtime::Status clear(size_t slot);

  runtime::Result<runtime::TensorLayout> get_tensor_layout(const char* key) const override;
  runtime::Result<runtime::FreeableBuffer> get_data(const char* key) const override;
  runtime::Status load_data_into(const char* key, void* dst, size_t size) const override;
  size_t get_num_keys() const override { return tables_.size(); }
  runtime::Result<const char*> get_key(size_t index) const override;
  runtime::Result<runtime::Digest> get_digest(const char* key) const override;
  const char* name() const override { return "the adapter tables"; }
  // The bytes are this object's own memory, written only by load() and clear() after their
  // checks: a method loaded over them needs no hash of them (and their digest, the initial
  // file's, no longer describes them once a slot is rewritten).
  bool content_verified(const char* key) const override;

 private:
  struct Table {
    std::string key;
    bool is_a = false;    // a: [slots, rank, in] (scales [slots, rank]); else b: [slots, rank, out]
    bool scales = false;  // [slots, rows] float32: the rows' scales of an int8 factor
    runtime::ScalarType type = runtime::ScalarType::Float;
    size_t element_size = sizeof(float);
    size_t dims = 3;
    int32_t sizes[3] = {};
    uint8_t dim_order[3] = {0, 1, 2};
    runtime::Digest digest;
    size_t offset = 0;        // In region_.
    uint8_t* data = nullptr;  // region_ + offset.
    size_t slot_numel() const {
      return static_cast<size_t>(sizes[1]) * (dims == 3 ? static_cast<size_t>(sizes[2]) : 1);
    }
    size_t numel() const { return static_cast<size_t>(sizes[0]) * slot_numel(); }
    size_t slot_bytes() const { return slot_numel() * element_size; }
  };
  AdapterTables() = default;
  const Table* find(const char* key) const;
  // Checks one entry of an adapter file against its table (shape, dtype, rank).
  runtime::Status check_entry(const runtime::DataFile& adapter, const char* key,
                              const Table& table) const;

  std::vector<Table> tables_;
  std::unique_ptr<uint8_t, void (*)(void*)> region_{nullptr, std::free};
  size_t slots_ = 0;
  size_t rank_ = 0;
  runtime::ScalarType dtype_ = runtime::ScalarType::Float;
  std::optional<runtime::Digest> foundation_;
};

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_ADAPTER_TABLES_H_
