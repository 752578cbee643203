// LoadedProgram / LoadedMethod on the demo's files: outputs copied out at their real shape, the
// errors the Python runtime raises, and one method run from two threads.

#include "edgeshare/extension/python/loaded_program.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace edgeshare {
namespace python {
namespace {

using runtime::DataFile;
using runtime::Error;
using runtime::Result;
using runtime::ScalarType;
using runtime::Tensor;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::shared_ptr<LoadedProgram> LoadLoraA() {
  Result<std::shared_ptr<const DataFile>> foundation =
      DataFile::open(Env("FOUNDATION_PTD").c_str());
  EXPECT_TRUE(foundation.ok()) << foundation.status().message();
  if (!foundation.ok()) return nullptr;
  Result<std::shared_ptr<LoadedProgram>> program =
      LoadedProgram::load(Env("LORA_A_PTE"), {*foundation});
  EXPECT_TRUE(program.ok()) << program.status().message();
  return program.ok() ? *program : nullptr;
}

// An input of the planned shape, filled with `value`; `storage` holds its floats.
Tensor FloatInput(const TensorSpec& spec, float value, std::vector<float>& storage,
                  std::vector<int32_t>& sizes) {
  size_t numel = 1;
  sizes.clear();
  for (int64_t size : spec.sizes) {
    sizes.push_back(static_cast<int32_t>(size));
    numel *= static_cast<size_t>(size);
  }
  storage.assign(numel, value);
  return Tensor(ScalarType::Float, runtime::Span<const int32_t>(sizes.data(), sizes.size()),
                storage.data());
}

TEST(LoadedProgramTest, OutputsAreCopiesAtThePlannedShapeThatTheNextRunLeavesAlone) {
  std::shared_ptr<LoadedProgram> program = LoadLoraA();
  ASSERT_NE(program, nullptr);
  ASSERT_EQ(program->num_methods(), 1u);
  Result<LoadedMethod*> method = program->method("forward");
  ASSERT_TRUE(method.ok()) << method.status().message();
  LoadedMethod& forward = **method;
  ASSERT_EQ(forward.inputs().size(), 1u);
  ASSERT_TRUE(forward.inputs()[0].is_tensor);
  EXPECT_EQ(forward.inputs()[0].type, ScalarType::Float);

  std::vector<float> storage;
  std::vector<int32_t> sizes;
  Result<std::vector<OwnedTensor>> first =
      forward.run({FloatInput(forward.inputs()[0], 0.5f, storage, sizes)});
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(first->size(), 1u);
  const OwnedTensor& out = first->front();
  EXPECT_EQ(out.sizes, forward.outputs()[0].sizes);
  const std::vector<uint8_t> kept(out.data.get(), out.data.get() + out.nbytes);

  Result<std::vector<OwnedTensor>> second =
      forward.run({FloatInput(forward.inputs()[0], -2.0f, storage, sizes)});
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(std::memcmp(out.data.get(), kept.data(), kept.size()), 0);
  EXPECT_NE(std::memcmp(second->front().data.get(), kept.data(), kept.size()), 0);
}

TEST(LoadedProgramTest, WrongInputCountAndUnknownMethodNameTheMethodAndProgram) {
  std::shared_ptr<LoadedProgram> program = LoadLoraA();
  ASSERT_NE(program, nullptr);
  LoadedMethod& forward = program->method(0);
  Result<std::vector<OwnedTensor>> none = forward.run({});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error(), Error::InvalidArgument);
  EXPECT_EQ(std::string(none.status().message()),
            "method 'forward' of " + Env("LORA_A_PTE") + " takes 1 input(s), not 0");

  Result<LoadedMethod*> chat = program->method("chat");
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.error(), Error::NotFound);
  EXPECT_EQ(std::string(chat.status().message()),
            Env("LORA_A_PTE") + " has no method 'chat' (methods: forward)");
}

TEST(LoadedProgramTest, WrongDtypeIsSetInputsMessageWithTheProgramNamed) {
  std::shared_ptr<LoadedProgram> program = LoadLoraA();
  ASSERT_NE(program, nullptr);
  LoadedMethod& forward = program->method(0);
  std::vector<float> storage;
  std::vector<int32_t> sizes;
  Tensor input = FloatInput(forward.inputs()[0], 1.0f, storage, sizes);
  Tensor as_int(ScalarType::Int, input.sizes(), storage.data());
  Result<std::vector<OwnedTensor>> result = forward.run({as_int});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error(), Error::InvalidArgument);
  EXPECT_NE(std::string(result.status().message()).find(Env("LORA_A_PTE")), std::string::npos);
  EXPECT_NE(std::string(result.status().message()).find("must be Float, not Int"),
            std::string::npos);
}

TEST(LoadedProgramTest, TwoThreadsOnOneMethodTakeTurns) {
  std::shared_ptr<LoadedProgram> program = LoadLoraA();
  ASSERT_NE(program, nullptr);
  LoadedMethod& forward = program->method(0);
  std::vector<float> storage;
  std::vector<int32_t> sizes;
  Result<std::vector<OwnedTensor>> expected =
      forward.run({FloatInput(forward.inputs()[0], 0.25f, storage, sizes)});
  ASSERT_TRUE(expected.ok());
  const OwnedTensor& want = expected->front();
  std::vector<int> mismatches(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> own_storage;
      std::vector<int32_t> own_sizes;
      for (int i = 0; i < 20; ++i) {
        Result<std::vector<OwnedTensor>> got =
            forward.run({FloatInput(forward.inputs()[0], 0.25f, own_storage, own_sizes)});
        if (!got.ok() || std::memcmp(got->front().data.get(), want.data.get(), want.nbytes) != 0) {
          ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>({0, 0}));
}

TEST(LoadedProgramTest, TheProgramKeepsItsDataFilesOpen) {
  const size_t before = DataFile::open_count();
  std::shared_ptr<LoadedProgram> program = LoadLoraA();  // Its only holder of foundation.ptd.
  ASSERT_NE(program, nullptr);
  EXPECT_EQ(DataFile::open_count(), before + 1);
  EXPECT_EQ(program->data_files().size(), 1u);
  program.reset();
  EXPECT_EQ(DataFile::open_count(), before);
}

TEST(LoadedProgramTest, MissingProgramFileIsNamed) {
  Result<std::shared_ptr<LoadedProgram>> program = LoadedProgram::load("/nonexistent/x.pte", {});
  ASSERT_FALSE(program.ok());
  EXPECT_NE(std::string(program.status().message()).find("/nonexistent/x.pte"), std::string::npos);
}

}  // namespace
}  // namespace python
}  // namespace edgeshare
