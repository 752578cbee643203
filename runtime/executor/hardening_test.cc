// Feeds thousands of broken .pte and .ptd files to Program::load, load_method, execute and the .ptd
// reader. Every file that does not load must give an Error; nothing may crash or read out of bounds
// (run under --config=asan to make the second half of that promise checkable).

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/runtime/data_loader/buffer_data_loader.h"
#include "edgeshare/runtime/data_loader/file_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/format/file_header.h"
#include "edgeshare/runtime/named_data/flat_tensor_data_map.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"
#include "edgeshare/schema/program_generated.h"
#include "edgeshare/testing/test_files.h"

namespace edgeshare {
namespace runtime {
namespace {

// One mutation of `bytes`: bit flips, a truncation, a header field set to a huge or small value,
// or a random 4-byte word inside the flatbuffer set to an extreme.
std::vector<uint8_t> Mutate(const std::vector<uint8_t>& bytes, std::mt19937& rng) {
  std::vector<uint8_t> out = bytes;
  std::uniform_int_distribution<size_t> any(0, bytes.size() - 1);
  switch (rng() % 5) {
    case 0: {
      const int flips = 1 + rng() % 8;
      for (int i = 0; i < flips; ++i) out[any(rng)] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    }
    case 1:
      out.resize(any(rng));
      break;
    case 2: {
      // A header field: the u64 offsets and sizes at 16..48.
      const size_t field = 16 + 8 * (rng() % 4);
      const uint64_t values[] = {0,
                                 1,
                                 47,
                                 48,
                                 bytes.size(),
                                 bytes.size() + 1,
                                 UINT64_MAX,
                                 UINT64_MAX / 2,
                                 static_cast<uint64_t>(rng())};
      const uint64_t v = values[rng() % (sizeof(values) / sizeof(values[0]))];
      std::memcpy(out.data() + field, &v, 8);
      break;
    }
    default: {
      // A word inside the flatbuffer (offsets, vector lengths, indices, sizes).
      const size_t at = 48 + (rng() % (std::min<size_t>(bytes.size(), 65536) - 52)) / 4 * 4;
      const uint32_t values[] = {
          0, 1, 0x7fffffff, 0xffffffff, 0x80000000, 4096, static_cast<uint32_t>(rng())};
      const uint32_t v = values[rng() % (sizeof(values) / sizeof(values[0]))];
      if (at + 4 <= out.size()) std::memcpy(out.data() + at, &v, 4);
      break;
    }
  }
  return out;
}

constexpr int kIterations = 2000;

struct Counts {
  int loaded = 0;  // programs that passed Program::load
  int ran = 0;     // methods that loaded and were executed
};

// Mutates lora_a.pte kIterations times (seeded) and loads and runs whatever survives.
Counts LoadAndRunMutatedPrograms() {
  const std::vector<uint8_t> pte = fixtures::read_file(fixtures::env_path("LORA_A_PTE"));
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  EXPECT_FALSE(pte.empty());
  BufferDataLoader ptd_loader(ptd.data(), ptd.size(), "foundation.ptd");
  auto foundation = FlatTensorDataMap::load(&ptd_loader);
  EXPECT_TRUE(foundation.ok()) << foundation.status().message();
  if (pte.empty() || !foundation.ok()) return Counts();
  std::vector<float> input(4 * 256, 0.5f);

  std::mt19937 rng(1234);
  Counts counts;
  for (int i = 0; i < kIterations; ++i) {
    const std::vector<uint8_t> bytes = Mutate(pte, rng);
    BufferDataLoader loader(bytes.data(), bytes.size(), "mutated.pte");
    Result<Program> program = Program::load(&loader);
    if (!program.ok()) {
      EXPECT_NE(program.error(), Error::Ok);
      EXPECT_GT(std::strlen(program.status().message()), 0u);
      continue;
    }
    ++counts.loaded;
    for (size_t m = 0; m < program->num_methods(); ++m) {
      Result<const char*> name = program->get_method_name(m);
      EXPECT_TRUE(name.ok());
      if (!name.ok()) continue;
      Result<Method> method = program->load_method(*name, &*foundation);
      if (!method.ok()) continue;
      if (method->num_inputs() == 1) {
        (void)method->set_input(0, Tensor(ScalarType::Float, {4, 256}, input.data()));
      }
      ++counts.ran;
      (void)method->execute();
    }
  }
  return counts;
}

// Most mutations land in the adapter weights (most of the file's bytes): with content verified,
// those methods fail at load (their bytes no longer match their digests) instead of running.
TEST(HardeningTest, MutatedProgramsFailWithAnErrorNeverACrash) {
  ASSERT_TRUE(xnnpack::verify_content_enabled());
  const Counts counts = LoadAndRunMutatedPrograms();
  // Seeded: 1165 of 2000 files load, 14 methods run. A third is a floor that still catches a
  // reader that fails nearly every file early and so tests nothing past its first check.
  EXPECT_GT(counts.loaded, kIterations / 3);
  EXPECT_GT(counts.ran, 0);
  RecordProperty("loaded", counts.loaded);
  RecordProperty("ran", counts.ran);
}

// The same files for the trusted-file mode: corrupted weights now reach execution, which must
// still never crash.
TEST(HardeningTest, MutatedProgramsRunUnverifiedWithoutACrash) {
  xnnpack::set_verify_content(false);
  const Counts counts = LoadAndRunMutatedPrograms();
  xnnpack::set_verify_content(true);
  // Seeded: 1165 load and 1077 methods run.
  EXPECT_GT(counts.loaded, kIterations / 3);
  EXPECT_GT(counts.ran, kIterations / 3);
  RecordProperty("loaded", counts.loaded);
  RecordProperty("ran", counts.ran);
}

// A .pte holding one hand-built method and no segments, for shapes the exporter never writes.
std::vector<uint8_t> OneMethodProgram(flatbuffers::FlatBufferBuilder& fbb,
                                      flatbuffers::Offset<schema::ExecutionPlan> plan) {
  schema::FinishProgramBuffer(
      fbb, schema::CreateProgram(fbb, kFormatVersion, fbb.CreateVector(&plan, 1)));
  std::vector<uint8_t> file(kFileHeaderSize, 0);
  auto put = [&file](size_t at, uint64_t value, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) file[at + i] = static_cast<uint8_t>(value >> (8 * i));
  };
  std::memcpy(file.data(), kProgramMagic, 4);
  put(4, kFormatVersion, 4);
  put(8, kFileHeaderSize, 4);
  put(16, kFileHeaderSize, 8);                  // flatbuffer offset
  put(24, fbb.GetSize(), 8);                    // flatbuffer size
  put(32, kFileHeaderSize + fbb.GetSize(), 8);  // segment base offset
  file.insert(file.end(), fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  return file;
}

Status LoadOnlyMethod(const std::vector<uint8_t>& bytes) {
  BufferDataLoader loader(bytes.data(), bytes.size(), "handmade.pte");
  ES_ASSIGN_OR_RETURN(Program program, Program::load(&loader));
  return program.load_method("forward").status();
}

// The FlatBuffers verifier accepts a union whose type is set but whose table is absent, and a
// union type this runtime does not know; loading must say so, not follow a null pointer.
TEST(HardeningTest, UnionsWithoutTheirTableAreErrors) {
  for (int kind = schema::KernelTypes_Int; kind <= schema::KernelTypes_String; ++kind) {
    flatbuffers::FlatBufferBuilder fbb;
    schema::EValueBuilder value(fbb);
    value.add_val_type(static_cast<schema::KernelTypes>(kind));
    const auto values = std::vector<flatbuffers::Offset<schema::EValue>>{value.Finish()};
    const auto plan =
        schema::CreateExecutionPlan(fbb, fbb.CreateString("forward"), fbb.CreateVector(values));
    Status status = LoadOnlyMethod(OneMethodProgram(fbb, plan));
    EXPECT_EQ(status.code(), Error::InvalidProgram) << kind;
    EXPECT_NE(std::strstr(status.message(), "value 0 is a"), nullptr) << status.message();
    // One line naming the file and the method.
    EXPECT_NE(std::strstr(status.message(), "method 'forward' from handmade.pte"), nullptr)
        << status.message();
    EXPECT_EQ(std::strchr(status.message(), '\n'), nullptr) << status.message();
  }
  for (int kind : {int{schema::InstructionArguments_KernelCall},
                   int{schema::InstructionArguments_DelegateCall},
                   int{schema::InstructionArguments_MAX} + 1}) {
    flatbuffers::FlatBufferBuilder fbb;
    schema::InstructionBuilder instruction(fbb);
    instruction.add_instr_args_type(static_cast<schema::InstructionArguments>(kind));
    const auto instructions =
        std::vector<flatbuffers::Offset<schema::Instruction>>{instruction.Finish()};
    const auto plan = schema::CreateExecutionPlan(fbb, fbb.CreateString("forward"), 0, 0, 0,
                                                  fbb.CreateVector(instructions));
    Status status = LoadOnlyMethod(OneMethodProgram(fbb, plan));
    EXPECT_EQ(status.code(), Error::InvalidProgram) << kind;
    EXPECT_NE(std::strstr(status.message(), "instruction 0 of kind"), nullptr) << status.message();
    EXPECT_NE(std::strstr(status.message(), "method 'forward' from handmade.pte"), nullptr)
        << status.message();
    EXPECT_EQ(std::strchr(status.message(), '\n'), nullptr) << status.message();
  }
}

TEST(HardeningTest, MutatedDataFilesFailWithAnErrorNeverACrash) {
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  ASSERT_FALSE(ptd.empty());
  std::mt19937 rng(5678);
  int loaded = 0;
  int rejected = 0;
  for (int i = 0; i < kIterations; ++i) {
    // Mutations concentrate on the header and flatbuffer, where the structure lives.
    std::vector<uint8_t> head(ptd.begin(), ptd.begin() + std::min<size_t>(ptd.size(), 8192));
    std::vector<uint8_t> bytes = Mutate(head, rng);
    if (bytes.size() == head.size())
      bytes.insert(bytes.end(), ptd.begin() + head.size(), ptd.end());
    BufferDataLoader loader(bytes.data(), bytes.size(), "mutated.ptd");
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
  }
  // Both outcomes are exercised: mutations caught at load, and files that load and are read.
  EXPECT_GT(rejected, kIterations / 10);
  EXPECT_GT(loaded, kIterations / 10);
  RecordProperty("loaded", loaded);
  RecordProperty("rejected", rejected);
}

TEST(HardeningTest, DuplicateKeysAcrossFilesAreRejected) {
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  BufferDataLoader first_loader(ptd.data(), ptd.size(), "foundation.ptd");
  BufferDataLoader second_loader(ptd.data(), ptd.size(), "copy_of_foundation.ptd");
  auto first = FlatTensorDataMap::load(&first_loader);
  auto second = FlatTensorDataMap::load(&second_loader);
  ASSERT_TRUE(first.ok() && second.ok());
  auto merged = MergedDataMap::create({&*first, &*second});
  ASSERT_FALSE(merged.ok());
  EXPECT_EQ(merged.error(), Error::AlreadyExists);
  EXPECT_NE(std::strstr(merged.status().message(), "copy_of_foundation.ptd"), nullptr);
}

TEST(HardeningTest, LoadDataIntoRefusesASmallDestination) {
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  BufferDataLoader loader(ptd.data(), ptd.size(), "foundation.ptd");
  auto map = FlatTensorDataMap::load(&loader);
  ASSERT_TRUE(map.ok());
  ASSERT_GT(map->get_num_keys(), 0u);
  const char* key = *map->get_key(0);
  auto layout = map->get_tensor_layout(key);
  ASSERT_TRUE(layout.ok());
  std::vector<uint8_t> dst(layout->nbytes());
  EXPECT_EQ(map->load_data_into(key, dst.data(), dst.size() - 1).code(), Error::InvalidArgument);
  EXPECT_TRUE(map->load_data_into(key, dst.data(), dst.size()).ok());
  EXPECT_EQ(map->get_tensor_layout("no.such.key").error(), Error::NotFound);
  EXPECT_EQ(map->get_key(map->get_num_keys()).error(), Error::OutOfRange);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
