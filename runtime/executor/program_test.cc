// Program and Method on the real demo files the exporter writes at build time
// (//tools:demo_lora_files).

#include "edgeshare/runtime/executor/program.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/data_loader/buffer_data_loader.h"
#include "edgeshare/runtime/data_loader/file_data_loader.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/tools/npy.h"

namespace edgeshare {
namespace runtime {
namespace {

std::string Fixture(const char* env) {
  const char* path = std::getenv(env);
  return path != nullptr ? path : "";
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  auto loader = FileDataLoader::from(path.c_str());
  EXPECT_TRUE(loader.ok()) << loader.status().message();
  std::vector<uint8_t> bytes(loader->size());
  EXPECT_TRUE(loader->load_into(0, bytes.size(), bytes.data()).ok());
  return bytes;
}

TEST(ProgramTest, ListsMethodsAndOwnsItsNamedData) {
  auto loader = FileDataLoader::from(Fixture("LORA_A_PTE").c_str());
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  auto program = Program::load(&*loader);
  ASSERT_TRUE(program.ok()) << program.status().message();
  ASSERT_EQ(program->num_methods(), 1u);
  EXPECT_STREQ(*program->get_method_name(0), "forward");
  EXPECT_EQ(program->get_method_name(1).error(), Error::OutOfRange);
  // The adapter weights travel with the program.
  ASSERT_NE(program->named_data(), nullptr);
  EXPECT_GT(program->named_data()->get_num_keys(), 0u);
  EXPECT_EQ(program->load_method("backward").error(), Error::NotFound);
}

TEST(ProgramTest, MissingDataFileIsAnErrorNamingTheKey) {
  auto loader = FileDataLoader::from(Fixture("LORA_A_PTE").c_str());
  ASSERT_TRUE(loader.ok());
  auto program = Program::load(&*loader);
  ASSERT_TRUE(program.ok());
  auto method = program->load_method("forward", nullptr);
  ASSERT_FALSE(method.ok());
  EXPECT_EQ(method.error(), Error::NotFound);
  const std::string message = method.status().message();
  EXPECT_NE(message.find("failed to load method 'forward'"), std::string::npos) << message;
  EXPECT_NE(message.find("key '"), std::string::npos) << message;
}

TEST(ProgramTest, RunsForwardAndMatchesTheExportersReference) {
  auto loader = FileDataLoader::from(Fixture("LORA_A_PTE").c_str());
  ASSERT_TRUE(loader.ok());
  auto program = Program::load(&*loader);
  ASSERT_TRUE(program.ok());
  auto foundation = DataFile::open(Fixture("FOUNDATION_PTD").c_str());
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  auto method = program->load_method("forward", &(*foundation)->map());
  ASSERT_TRUE(method.ok()) << method.status().message();
  auto input = tools::read_npy(Fixture("LORA_A_INPUT"));
  auto expected = tools::read_npy(Fixture("LORA_A_OUTPUT"));
  ASSERT_TRUE(input.ok() && expected.ok());
  ASSERT_TRUE(method->set_input(0, input->tensor()).ok());
  ASSERT_TRUE(method->execute().ok());
  auto out = method->output(0);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->numel() * 4, expected->data.size());
  const float* want = reinterpret_cast<const float*>(expected->data.data());
  for (size_t i = 0; i < out->numel(); ++i) {
    ASSERT_NEAR(out->data<float>()[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i])) << i;
  }
}

TEST(ProgramTest, SetInputChecksShapeAndType) {
  auto loader = FileDataLoader::from(Fixture("LORA_A_PTE").c_str());
  ASSERT_TRUE(loader.ok());
  auto program = Program::load(&*loader);
  ASSERT_TRUE(program.ok());
  auto foundation = DataFile::open(Fixture("FOUNDATION_PTD").c_str());
  ASSERT_TRUE(foundation.ok());
  auto method = program->load_method("forward", &(*foundation)->map());
  ASSERT_TRUE(method.ok()) << method.status().message();
  std::vector<float> data(4 * 256);
  Status wrong_shape = method->set_input(0, Tensor(ScalarType::Float, {256, 4}, data.data()));
  EXPECT_EQ(wrong_shape.code(), Error::InvalidArgument);
  EXPECT_NE(std::strstr(wrong_shape.message(), "[4, 256]"), nullptr) << wrong_shape.message();
  EXPECT_EQ(method->set_input(0, Tensor(ScalarType::Int, {4, 256}, data.data())).code(),
            Error::InvalidArgument);
  EXPECT_EQ(method->set_input(1, Tensor(ScalarType::Float, {4, 256}, data.data())).code(),
            Error::OutOfRange);
}

TEST(ProgramTest, CorruptHeadersAreErrorsNamingTheFile) {
  std::vector<uint8_t> bytes = ReadAll(Fixture("LORA_A_PTE"));
  {
    std::vector<uint8_t> bad = bytes;
    bad[0] = 'X';
    BufferDataLoader loader(bad.data(), bad.size(), "bad_magic.pte");
    auto program = Program::load(&loader);
    EXPECT_EQ(program.error(), Error::InvalidProgram);
    EXPECT_NE(std::strstr(program.status().message(), "bad_magic.pte"), nullptr);
  }
  {
    BufferDataLoader loader(bytes.data(), 47, "short.pte");
    EXPECT_EQ(Program::load(&loader).error(), Error::InvalidProgram);
  }
  {
    BufferDataLoader loader(bytes.data(), bytes.size() - 1, "truncated.pte");
    EXPECT_EQ(Program::load(&loader).error(), Error::InvalidProgram);
  }
  {
    std::vector<uint8_t> bad = bytes;
    bad[4] = 99;  // format version
    BufferDataLoader loader(bad.data(), bad.size(), "future.pte");
    auto program = Program::load(&loader);
    EXPECT_EQ(program.error(), Error::InvalidProgram);
    EXPECT_NE(std::strstr(program.status().message(), "version"), nullptr);
  }
  {
    // A .ptd is not a .pte.
    std::vector<uint8_t> ptd = ReadAll(Fixture("FOUNDATION_PTD"));
    BufferDataLoader loader(ptd.data(), ptd.size(), "foundation.ptd");
    EXPECT_EQ(Program::load(&loader).error(), Error::InvalidProgram);
  }
}

// Hands out a fresh heap copy for every load() and remembers which copies are not given back yet,
// so a test can see who keeps the program's bytes (and ASan flags any read after they go).
class CopyingLoader final : public DataLoader {
 public:
  explicit CopyingLoader(const DataLoader* file) : file_(file) {}

  Result<FreeableBuffer> load(size_t offset, size_t size) const override {
    void* copy = std::malloc(size == 0 ? 1 : size);
    if (copy == nullptr) return Error::MemoryAllocationFailed;
    Status status = file_->load_into(offset, size, copy);
    if (!status.ok()) {
      std::free(copy);
      return status;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(offset);
    return FreeableBuffer(copy, size, &CopyingLoader::give_back, new Piece{this, offset});
  }
  size_t size() const override { return file_->size(); }
  const char* name() const override { return file_->name(); }

  std::multiset<size_t> live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }

 private:
  struct Piece {
    const CopyingLoader* loader;
    size_t offset;
  };
  static void give_back(void* context, const void* data, size_t) {
    std::unique_ptr<Piece> piece(static_cast<Piece*>(context));
    std::lock_guard<std::mutex> lock(piece->loader->mutex_);
    piece->loader->live_.erase(piece->loader->live_.find(piece->offset));
    std::free(const_cast<void*>(data));
  }

  const DataLoader* file_;
  mutable std::mutex mutex_;
  mutable std::multiset<size_t> live_;
};

TEST(ProgramTest, MethodKeepsRunningAfterItsProgramIsDestroyed) {
  auto file = FileDataLoader::from(Fixture("LORA_A_PTE").c_str());
  ASSERT_TRUE(file.ok());
  CopyingLoader loader(&*file);
  auto foundation = DataFile::open(Fixture("FOUNDATION_PTD").c_str());
  ASSERT_TRUE(foundation.ok());
  auto input = tools::read_npy(Fixture("LORA_A_INPUT"));
  auto expected = tools::read_npy(Fixture("LORA_A_OUTPUT"));
  ASSERT_TRUE(input.ok() && expected.ok());

  std::optional<Program> program;
  {
    auto loaded = Program::load(&loader);
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    program.emplace(std::move(*loaded));
  }
  // What the Program holds after load: its flatbuffer.
  const std::multiset<size_t> program_bytes = loader.live();
  ASSERT_FALSE(program_bytes.empty());
  std::optional<Method> method;
  {
    auto loaded = program->load_method("forward", &(*foundation)->map());
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    method.emplace(std::move(*loaded));
  }
  program.reset();

  // The Method keeps what it points into alive...
  for (size_t offset : program_bytes) EXPECT_EQ(loader.live().count(offset), 1u) << offset;
  EXPECT_STREQ(method->name(), "forward");
  ASSERT_TRUE(method->set_input(0, input->tensor()).ok());
  Status status = method->execute();
  ASSERT_TRUE(status.ok()) << status.message();
  auto out = method->output(0);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->numel() * 4, expected->data.size());
  const float* want = reinterpret_cast<const float*>(expected->data.data());
  for (size_t i = 0; i < out->numel(); ++i) {
    ASSERT_NEAR(out->data<float>()[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i])) << i;
  }
  // ...and the last one to go gives the program's bytes back.
  method.reset();
  for (size_t offset : program_bytes) EXPECT_EQ(loader.live().count(offset), 0u) << offset;
}

TEST(ProgramTest, TwoMethodsOfOneProgramRunOnTwoThreads) {
  auto loader = FileDataLoader::from(Fixture("LORA_A_PTE").c_str());
  ASSERT_TRUE(loader.ok());
  auto program = Program::load(&*loader);
  ASSERT_TRUE(program.ok());
  auto foundation = DataFile::open(Fixture("FOUNDATION_PTD").c_str());
  ASSERT_TRUE(foundation.ok());
  // Two loaded instances of "forward": separate planned memory, shared packed weights.
  auto first = program->load_method("forward", &(*foundation)->map());
  auto second = program->load_method("forward", &(*foundation)->map());
  ASSERT_TRUE(first.ok() && second.ok());
  auto input = tools::read_npy(Fixture("LORA_A_INPUT"));
  auto expected = tools::read_npy(Fixture("LORA_A_OUTPUT"));
  ASSERT_TRUE(input.ok() && expected.ok());
  const float* want = reinterpret_cast<const float*>(expected->data.data());
  auto worker = [&](Method* method, std::vector<float> scale, int* mismatches) {
    // Each thread runs a different input (scaled), so crossed buffers would show.
    std::vector<float> x(input->data.size() / 4);
    const float* base = reinterpret_cast<const float*>(input->data.data());
    for (int iteration = 0; iteration < 200; ++iteration) {
      const bool plain = scale[iteration % scale.size()] == 1.0f;
      for (size_t i = 0; i < x.size(); ++i) x[i] = base[i] * scale[iteration % scale.size()];
      if (!method->set_input(0, Tensor(ScalarType::Float, {4, 256}, x.data())).ok() ||
          !method->execute().ok()) {
        ++*mismatches;
        continue;
      }
      if (!plain) continue;
      const float* y = method->output(0)->data<float>();
      for (size_t i = 0; i < method->output(0)->numel(); ++i) {
        if (std::fabs(y[i] - want[i]) > 1e-4f + 1e-4f * std::fabs(want[i])) {
          ++*mismatches;
          break;
        }
      }
    }
  };
  int mismatches_a = 0;
  int mismatches_b = 0;
  std::thread a(worker, &*first, std::vector<float>{1.0f, 2.0f}, &mismatches_a);
  std::thread b(worker, &*second, std::vector<float>{-3.0f, 1.0f}, &mismatches_b);
  a.join();
  b.join();
  EXPECT_EQ(mismatches_a, 0);
  EXPECT_EQ(mismatches_b, 0);
}

// Two contexts in one process: a method loaded under Threads of 1 and another under Threads of 2
// (its kernels and delegate ops split across its own helpers and pool), run at once from two
// threads, each giving the outputs one thread alone gives (CI runs this under TSan).
TEST(ProgramTest, MethodsUnderThreadsOfOneAndTwoRunAtOnceAsOneThreadAlone) {
  auto loader = FileDataLoader::from(Fixture("LORA_A_PTE").c_str());
  ASSERT_TRUE(loader.ok());
  auto program = Program::load(&*loader);
  ASSERT_TRUE(program.ok());
  auto foundation = DataFile::open(Fixture("FOUNDATION_PTD").c_str());
  ASSERT_TRUE(foundation.ok());
  auto input = tools::read_npy(Fixture("LORA_A_INPUT"));
  ASSERT_TRUE(input.ok());
  const float* base = reinterpret_cast<const float*>(input->data.data());
  const std::vector<float> scales = {1.0f, -2.0f, 0.5f};
  auto scaled = [&](float scale) {
    std::vector<float> x(input->data.size() / 4);
    for (size_t i = 0; i < x.size(); ++i) x[i] = base[i] * scale;
    return x;
  };
  // The 1-thread outputs, per scale.
  std::vector<std::vector<float>> want;
  {
    auto alone = program->load_method("forward", &(*foundation)->map());
    ASSERT_TRUE(alone.ok()) << alone.status().message();
    for (float scale : scales) {
      std::vector<float> x = scaled(scale);
      ASSERT_TRUE(alone->set_input(0, Tensor(ScalarType::Float, {4, 256}, x.data())).ok());
      ASSERT_TRUE(alone->execute().ok());
      const Tensor y = *alone->output(0);
      want.emplace_back(y.data<float>(), y.data<float>() + y.numel());
    }
  }
  auto one = Threads::create(1);
  auto two = Threads::create(2);
  ASSERT_TRUE(one.ok() && two.ok());
  auto on_one = program->load_method("forward", &(*foundation)->map(), &*one);
  auto on_two = program->load_method("forward", &(*foundation)->map(), &*two);
  ASSERT_TRUE(on_one.ok() && on_two.ok());
  auto worker = [&](Method* method, size_t first_scale, int* mismatches) {
    // Each thread goes through the scales from another one, so crossed buffers would show.
    for (size_t iteration = 0; iteration < 150; ++iteration) {
      const size_t s = (first_scale + iteration) % scales.size();
      std::vector<float> x = scaled(scales[s]);
      if (!method->set_input(0, Tensor(ScalarType::Float, {4, 256}, x.data())).ok() ||
          !method->execute().ok() || current_threads() != nullptr) {
        ++*mismatches;
        continue;
      }
      const Tensor y = *method->output(0);
      if (static_cast<size_t>(y.numel()) != want[s].size() ||
          std::memcmp(y.data<float>(), want[s].data(), want[s].size() * sizeof(float)) != 0) {
        ++*mismatches;
      }
    }
  };
  int mismatches_one = 0;
  int mismatches_two = 0;
  std::thread a(worker, &*on_one, 0, &mismatches_one);
  std::thread b(worker, &*on_two, 1, &mismatches_two);
  a.join();
  b.join();
  EXPECT_EQ(mismatches_one, 0);
  EXPECT_EQ(mismatches_two, 0);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
