// Structure-aware fuzzing of .pte and .ptd files. Where hardening_test flips bytes (and so mostly
// trips the FlatBuffers verifier), this one edits the demo files through the schemas' object API:
// unions whose type is set but whose value is absent, values of the wrong kind, tensors without
// sizes, dim orders or allocations, indices past every table, instruction outputs that are
// constants, missing and duplicated named data, segments out of range. It repacks each edited
// program into a well-formed file (valid flatbuffer, valid header, the original segments), so every
// such file reaches Program::load, load_method and execute. Every file must end in an Error with a
// one-line message or load and run; nothing may crash or read out of bounds (CI runs this under
// ASan + UBSan).

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "edgeshare/runtime/data_loader/buffer_data_loader.h"
#include "edgeshare/runtime/data_loader/file_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/flat_tensor_data_map.h"
#include "edgeshare/schema/flat_tensor_generated.h"
#include "edgeshare/schema/program_generated.h"
#include "edgeshare/testing/test_files.h"

namespace edgeshare {
namespace runtime {
namespace {

namespace fb = ::edgeshare::schema;

constexpr size_t kHeaderSize = 48;

uint64_t GetU64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, &b[at], 8);
  return v;
}
void PutU64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// A file split into its header, its flatbuffer and its segment area.
struct Image {
  std::vector<uint8_t> header;
  std::vector<uint8_t> flatbuffer;
  std::vector<uint8_t> segments;
  uint64_t alignment = 64;
};

Image Split(const std::vector<uint8_t>& file, uint64_t alignment) {
  Image image;
  image.header.assign(file.begin(), file.begin() + kHeaderSize);
  const uint64_t fb_offset = GetU64(file, 16), fb_size = GetU64(file, 24);
  const uint64_t base = GetU64(file, 32), size = GetU64(file, 40);
  image.flatbuffer.assign(file.begin() + fb_offset, file.begin() + fb_offset + fb_size);
  image.segments.assign(file.begin() + base, file.begin() + base + size);
  image.alignment = alignment;
  return image;
}

// The header of `image` over a new flatbuffer, then the original segments.
std::vector<uint8_t> Join(const Image& image, const uint8_t* fb_data, size_t fb_size) {
  const uint64_t base = AlignUp(kHeaderSize + fb_size, image.alignment);
  std::vector<uint8_t> out(base + image.segments.size(), 0);
  std::memcpy(out.data(), image.header.data(), kHeaderSize);
  PutU64(out, 16, kHeaderSize);
  PutU64(out, 24, fb_size);
  PutU64(out, 32, base);
  PutU64(out, 40, image.segments.size());
  std::memcpy(&out[kHeaderSize], fb_data, fb_size);
  if (!image.segments.empty())
    std::memcpy(&out[base], image.segments.data(), image.segments.size());
  return out;
}

// Which union values the packer leaves out, by (plan, index): the union keeps its type, or takes
// the one given (a type whose table is absent).
struct Absent {
  std::map<std::pair<size_t, size_t>, fb::KernelTypes> values;
  std::set<std::pair<size_t, size_t>> instructions;
};

// ExecutionPlan::Pack, except that the object API cannot write a union whose value is absent.
flatbuffers::Offset<fb::ExecutionPlan> PackPlan(flatbuffers::FlatBufferBuilder& fbb,
                                                const fb::ExecutionPlanT& plan, size_t p,
                                                const Absent& absent) {
  std::vector<flatbuffers::Offset<fb::EValue>> values;
  for (size_t i = 0; i < plan.values.size(); ++i) {
    const fb::KernelTypesUnion& u = plan.values[i]->val;
    const auto override_type = absent.values.find({p, i});
    const bool drop = override_type != absent.values.end() || u.value == nullptr;
    const flatbuffers::Offset<void> val = drop ? 0 : u.Pack(fbb);
    fb::EValueBuilder b(fbb);
    b.add_val_type(override_type != absent.values.end() ? override_type->second : u.type);
    if (!drop) b.add_val(val);
    values.push_back(b.Finish());
  }
  std::vector<flatbuffers::Offset<fb::Instruction>> instructions;
  for (size_t i = 0; i < plan.instructions.size(); ++i) {
    const fb::InstructionArgumentsUnion& u = plan.instructions[i]->instr_args;
    const bool drop = absent.instructions.count({p, i}) > 0 || u.value == nullptr;
    const flatbuffers::Offset<void> args = drop ? 0 : u.Pack(fbb);
    fb::InstructionBuilder b(fbb);
    b.add_instr_args_type(u.type);
    if (!drop) b.add_instr_args(args);
    instructions.push_back(b.Finish());
  }
  std::vector<flatbuffers::Offset<fb::Operator>> operators;
  for (const auto& op : plan.operators) operators.push_back(fb::CreateOperator(fbb, op.get()));
  std::vector<flatbuffers::Offset<fb::BackendDelegate>> delegates;
  for (const auto& d : plan.delegates) delegates.push_back(fb::CreateBackendDelegate(fbb, d.get()));
  return fb::CreateExecutionPlanDirect(fbb, plan.name.c_str(), &values, &plan.inputs, &plan.outputs,
                                       &instructions, &operators, &delegates,
                                       &plan.non_const_buffer_sizes);
}

std::vector<uint8_t> PackProgram(const Image& image, const fb::ProgramT& program,
                                 const Absent& absent) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::ExecutionPlan>> plans;
  for (size_t p = 0; p < program.execution_plans.size(); ++p) {
    plans.push_back(PackPlan(fbb, *program.execution_plans[p], p, absent));
  }
  std::vector<flatbuffers::Offset<fb::NamedData>> named;
  for (const auto& n : program.named_data) named.push_back(fb::CreateNamedData(fbb, n.get()));
  auto root = fb::CreateProgram(fbb, program.version, fbb.CreateVector(plans),
                                fbb.CreateVectorOfStructs(program.segments),
                                program.segment_alignment, fbb.CreateVector(named));
  fb::FinishProgramBuffer(fbb, root);
  return Join(image, fbb.GetBufferPointer(), fbb.GetSize());
}

// Random choices, biased towards the values that break things: 0, 1, -1, past the end, huge.
class Chooser {
 public:
  explicit Chooser(uint32_t seed) : rng_(seed) {}
  size_t below(size_t n) { return n == 0 ? 0 : rng_() % n; }
  bool coin() { return rng_() % 2 == 0; }
  int64_t edgy(int64_t size) {
    const int64_t picks[] = {0,         1,         -1,
                             size - 1,  size,      size + 1,
                             INT32_MAX, INT64_MIN, static_cast<int64_t>(rng_() % 64)};
    return picks[below(sizeof(picks) / sizeof(picks[0]))];
  }
  uint32_t index(size_t size) { return static_cast<uint32_t>(edgy(static_cast<int64_t>(size))); }

 private:
  std::mt19937 rng_;
};

std::unique_ptr<fb::TensorT> RandomTensor(Chooser& c, size_t num_segments) {
  auto t = std::make_unique<fb::TensorT>();
  t->scalar_type = static_cast<fb::ScalarType>(c.below(16));
  const size_t rank = c.below(6);
  for (size_t d = 0; d < rank; ++d) t->sizes.push_back(static_cast<int32_t>(c.edgy(8)));
  for (size_t d = 0; d < rank; ++d)
    t->dim_order.push_back(static_cast<uint8_t>(c.coin() ? d : c.below(8)));
  switch (c.below(3)) {
    case 0:
      t->allocation = std::make_unique<fb::AllocationInfoT>();
      t->allocation->memory_id = c.index(2);
      t->allocation->offset = static_cast<uint64_t>(c.edgy(1 << 20));
      break;
    case 1:
      t->constant_segment = static_cast<int32_t>(c.edgy(static_cast<int64_t>(num_segments)));
      break;
    default:
      t->external_key = c.coin() ? "fc1.weight" : "no.such.key";
      break;
  }
  return t;
}

// Replaces value i's payload by something of a random kind (or the same kind, edited).
void MutateValue(Chooser& c, fb::ExecutionPlanT& plan, size_t p, size_t i, size_t num_segments,
                 Absent* absent) {
  fb::KernelTypesUnion& u = plan.values[i]->val;
  switch (c.below(7)) {
    case 0:  // the type stays, the value goes
      (*absent).values[{p, i}] = u.type;
      break;
    case 1:
      u.Set(fb::IntT());
      u.AsInt()->int_val = c.edgy(1 << 20);
      break;
    case 2:
      u.Set(fb::NullT());
      break;
    case 3: {
      fb::IntListT list;
      const size_t n = c.below(5);
      for (size_t k = 0; k < n; ++k) list.items.push_back(c.edgy(8));
      u.Set(std::move(list));
      break;
    }
    case 4: {
      fb::StringT s;
      s.string_val = c.coin() ? "tanh" : "";
      u.Set(std::move(s));
      break;
    }
    case 5: {
      auto t = RandomTensor(c, num_segments);
      u.Set(std::move(*t));
      break;
    }
    default:
      if (u.type == fb::KernelTypes_Tensor && u.value != nullptr) {
        fb::TensorT* t = u.AsTensor();
        switch (c.below(5)) {
          case 0:
            t->sizes.clear();
            break;
          case 1:
            t->dim_order.clear();
            break;
          case 2:
            t->allocation.reset();
            break;
          case 3:
            if (!t->sizes.empty())
              t->sizes[c.below(t->sizes.size())] = static_cast<int32_t>(c.edgy(1 << 16));
            break;
          default:
            t->scalar_type = static_cast<fb::ScalarType>(c.below(32));
            break;
        }
      } else {
        // Another type, its table absent.
        (*absent).values[{p, i}] = static_cast<fb::KernelTypes>(1 + c.below(7));
      }
      break;
  }
}

void MutateInstruction(Chooser& c, fb::ExecutionPlanT& plan, size_t p, size_t i, Absent* absent) {
  fb::InstructionArgumentsUnion& u = plan.instructions[i]->instr_args;
  std::vector<uint32_t>* args = nullptr;
  if (u.type == fb::InstructionArguments_KernelCall && u.value != nullptr) {
    args = &u.AsKernelCall()->args;
  } else if (u.type == fb::InstructionArguments_DelegateCall && u.value != nullptr) {
    args = &u.AsDelegateCall()->args;
  }
  switch (c.below(5)) {
    case 0:
      absent->instructions.insert({p, i});
      break;
    case 1:  // an argument (often the output, the last one) names any value, constants included
      if (args != nullptr && !args->empty()) {
        const size_t at = c.coin() ? args->size() - 1 : c.below(args->size());
        (*args)[at] = c.coin() ? static_cast<uint32_t>(c.below(plan.values.size()))
                               : c.index(plan.values.size());
      }
      break;
    case 2:
      if (args != nullptr && !args->empty()) args->resize(c.below(args->size()));
      break;
    case 3:
      if (u.type == fb::InstructionArguments_KernelCall && u.value != nullptr) {
        u.AsKernelCall()->op_index = c.index(plan.operators.size());
      } else if (u.value != nullptr) {
        u.AsDelegateCall()->delegate_index = c.index(plan.delegates.size());
      }
      break;
    default: {  // the other kind of call, same arguments
      if (u.type == fb::InstructionArguments_KernelCall && u.value != nullptr) {
        fb::DelegateCallT call;
        call.args = u.AsKernelCall()->args;
        u.Set(std::move(call));
      } else if (u.value != nullptr) {
        fb::KernelCallT call;
        call.args = u.AsDelegateCall()->args;
        u.Set(std::move(call));
      }
      break;
    }
  }
}

void MutatePlan(Chooser& c, fb::ProgramT& program, Absent* absent) {
  if (program.execution_plans.empty()) return;
  const size_t p = c.below(program.execution_plans.size());
  fb::ExecutionPlanT& plan = *program.execution_plans[p];
  const size_t num_segments = program.segments.size();
  switch (c.below(8)) {
    case 0:
    case 1:
      if (!plan.values.empty()) {
        MutateValue(c, plan, p, c.below(plan.values.size()), num_segments, absent);
      }
      break;
    case 2:
    case 3:
      if (!plan.instructions.empty()) {
        MutateInstruction(c, plan, p, c.below(plan.instructions.size()), absent);
      }
      break;
    case 4: {
      std::vector<uint32_t>& io = c.coin() ? plan.inputs : plan.outputs;
      if (!io.empty() && c.coin()) {
        io[c.below(io.size())] = c.index(plan.values.size());
      } else {
        io.push_back(static_cast<uint32_t>(c.below(plan.values.size() + 1)));
      }
      break;
    }
    case 5:
      if (!plan.non_const_buffer_sizes.empty() && c.coin()) {
        plan.non_const_buffer_sizes[c.below(plan.non_const_buffer_sizes.size())] =
            static_cast<uint64_t>(c.edgy(1 << 16));
      } else {
        plan.non_const_buffer_sizes.clear();
      }
      break;
    case 6:
      if (!plan.delegates.empty()) {
        fb::BackendDelegateT& d = *plan.delegates[c.below(plan.delegates.size())];
        if (c.coin())
          d.segment_index = c.index(num_segments);
        else
          d.id = c.coin() ? "NoSuchBackend" : "";
      } else if (!plan.operators.empty()) {
        plan.operators[c.below(plan.operators.size())]->name = "aten::no_such_op";
      }
      break;
    default:
      if (!program.segments.empty()) {
        fb::DataSegment& s = program.segments[c.below(program.segments.size())];
        s = fb::DataSegment(static_cast<uint64_t>(c.edgy(1 << 20)), s.size());
      }
      break;
  }
}

// Loads every method of `bytes` over `data` and runs it twice; returns (loaded, ran) counts.
// Counts in *writes_refused the methods refused for a call that writes what it must not.
std::pair<int, int> LoadAndRun(const std::vector<uint8_t>& bytes, const NamedDataMap* data,
                               int* rejected, int* writes_refused = nullptr) {
  BufferDataLoader loader(bytes.data(), bytes.size(), "fuzzed.pte");
  Result<Program> program = Program::load(&loader);
  if (!program.ok()) {
    ++*rejected;
    EXPECT_NE(program.error(), Error::Ok);
    EXPECT_GT(std::strlen(program.status().message()), 0u);
    EXPECT_EQ(std::strchr(program.status().message(), '\n'), nullptr);
    return {0, 0};
  }
  int loaded = 0, ran = 0;
  for (size_t m = 0; m < program->num_methods(); ++m) {
    Result<const char*> name = program->get_method_name(m);
    if (!name.ok()) continue;
    Result<Method> method = program->load_method(*name, data);
    if (!method.ok()) {
      ++*rejected;
      const bool write_refused =
          std::strstr(method.status().message(), " writes argument ") != nullptr;
      if (writes_refused != nullptr && write_refused) ++*writes_refused;
      EXPECT_GT(std::strlen(method.status().message()), 0u);
      EXPECT_EQ(std::strchr(method.status().message(), '\n'), nullptr);
      continue;
    }
    ++loaded;
    for (size_t i = 0; i < method->num_inputs(); ++i) {
      Result<Tensor> in = method->input(i);
      if (in.ok() && in->mutable_data() != nullptr)
        std::memset(in->mutable_data(), 0, in->nbytes());
    }
    if (method->execute().ok()) ++ran;
    (void)method->execute();
  }
  return {loaded, ran};
}

constexpr int kPrograms = 3000;
constexpr int kDataFiles = 1500;

TEST(StructureFuzzTest, EditedProgramsFailWithAnErrorNeverACrash) {
  const std::vector<uint8_t> pte = fixtures::read_file(fixtures::env_path("LORA_A_PTE"));
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  ASSERT_FALSE(pte.empty());
  BufferDataLoader ptd_loader(ptd.data(), ptd.size(), "foundation.ptd");
  auto foundation = FlatTensorDataMap::load(&ptd_loader);
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  ASSERT_TRUE(fb::ProgramBufferHasIdentifier(pte.data() + GetU64(pte, 16)));
  const fb::Program* original = fb::GetProgram(pte.data() + GetU64(pte, 16));
  const Image image = Split(pte, original->segment_alignment());
  std::unique_ptr<fb::ProgramT> unpacked(original->UnPack());

  // The repacked, unedited program loads and runs: the edits below are what makes files fail.
  int rejected = 0;
  const auto clean = LoadAndRun(PackProgram(image, *unpacked, Absent()), &*foundation, &rejected);
  ASSERT_EQ(rejected, 0);
  ASSERT_GT(clean.second, 0);

  Chooser c(20261124);
  int loaded = 0, ran = 0, writes_refused = 0;
  for (int i = 0; i < kPrograms; ++i) {
    fb::ProgramT program(*unpacked);
    Absent absent;
    const size_t edits = 1 + c.below(3);
    for (size_t e = 0; e < edits; ++e) MutatePlan(c, program, &absent);
    const auto counts =
        LoadAndRun(PackProgram(image, program, absent), &*foundation, &rejected, &writes_refused);
    loaded += counts.first;
    ran += counts.second;
  }
  // Edits that land in unused corners leave a runnable program; most must be caught at load.
  // Seeded: 2759 rejected (2676 before calls' inputs and outputs were checked at load), 241 loaded
  // (324), 176 ran (213), 43 of them refused for writing an input, a constant or a non-tensor.
  EXPECT_GT(rejected, kPrograms / 2);
  EXPECT_GT(loaded, 0);
  EXPECT_GT(ran, 0);
  // The edits that point a call's output at the method's input or at a constant reach the check.
  EXPECT_GT(writes_refused, 0);
  RecordProperty("writes_refused", writes_refused);
  RecordProperty("rejected", rejected);
  RecordProperty("loaded", loaded);
  RecordProperty("ran", ran);
}

void MutateDataFile(Chooser& c, fb::FlatTensorT& file) {
  if (file.named_data.empty()) return;
  fb::NamedDataT& entry = *file.named_data[c.below(file.named_data.size())];
  switch (c.below(8)) {
    case 0:
      entry.tensor_layout.reset();
      break;
    case 1:
      if (entry.tensor_layout != nullptr) entry.tensor_layout->sizes.clear();
      break;
    case 2:
      if (entry.tensor_layout != nullptr) entry.tensor_layout->dim_order.clear();
      break;
    case 3:
      if (entry.tensor_layout != nullptr && !entry.tensor_layout->sizes.empty()) {
        auto& sizes = entry.tensor_layout->sizes;
        sizes[c.below(sizes.size())] = static_cast<int32_t>(c.edgy(1 << 16));
      }
      break;
    case 4:
      entry.segment_index = c.index(file.segments.size());
      break;
    case 5:
      entry.digest.resize(c.below(40));
      break;
    case 6:
      entry.key = c.coin() ? "" : file.named_data[c.below(file.named_data.size())]->key;
      break;
    default: {
      fb::DataSegment& s = file.segments[c.below(file.segments.size())];
      s = fb::DataSegment(static_cast<uint64_t>(c.edgy(1 << 20)),
                          c.coin() ? s.size() : static_cast<uint64_t>(c.edgy(1 << 20)));
      break;
    }
  }
}

TEST(StructureFuzzTest, EditedDataFilesFailWithAnErrorNeverACrash) {
  const std::vector<uint8_t> pte = fixtures::read_file(fixtures::env_path("LORA_A_PTE"));
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  ASSERT_FALSE(ptd.empty());
  const fb::FlatTensor* original = fb::GetFlatTensor(ptd.data() + GetU64(ptd, 16));
  const Image image = Split(ptd, original->tensor_alignment());
  std::unique_ptr<fb::FlatTensorT> unpacked(original->UnPack());
  BufferDataLoader pte_loader(pte.data(), pte.size(), "lora_a.pte");
  auto program = Program::load(&pte_loader);
  ASSERT_TRUE(program.ok()) << program.status().message();

  Chooser c(5678);
  int rejected = 0, loaded = 0, ran = 0;
  for (int i = 0; i < kDataFiles; ++i) {
    fb::FlatTensorT file(*unpacked);
    const size_t edits = 1 + c.below(2);
    for (size_t e = 0; e < edits; ++e) MutateDataFile(c, file);
    flatbuffers::FlatBufferBuilder fbb;
    fb::FinishFlatTensorBuffer(fbb, fb::CreateFlatTensor(fbb, &file));
    const std::vector<uint8_t> bytes = Join(image, fbb.GetBufferPointer(), fbb.GetSize());
    BufferDataLoader loader(bytes.data(), bytes.size(), "fuzzed.ptd");
    Result<FlatTensorDataMap> map = FlatTensorDataMap::load(&loader);
    if (!map.ok()) {
      ++rejected;
      EXPECT_GT(std::strlen(map.status().message()), 0u);
      continue;
    }
    ++loaded;
    for (size_t k = 0; k < map->get_num_keys(); ++k) {
      Result<const char*> key = map->get_key(k);
      ASSERT_TRUE(key.ok());
      Result<FreeableBuffer> data = map->get_data(*key);
      Result<TensorLayout> layout = map->get_tensor_layout(*key);
      if (data.ok() && layout.ok()) {
        EXPECT_EQ(data->size(), layout->nbytes());
      }
    }
    // The program over an edited foundation: wrong shapes or missing keys must fail at load.
    Result<Method> method = program->load_method("forward", &*map);
    if (method.ok() && method->execute().ok()) ++ran;
  }
  EXPECT_GT(rejected, kDataFiles / 4);
  EXPECT_GT(loaded, 0);
  EXPECT_GT(ran, 0);
  RecordProperty("rejected", rejected);
  RecordProperty("loaded", loaded);
  RecordProperty("ran", ran);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
