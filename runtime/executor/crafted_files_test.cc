// One hand-crafted file per class of hostile file the runtime must survive: each
// must end in a one-line error naming the file, the method and the offending field. The files are
// built with the schema's object API, next to a clean variant that loads and runs, so each error is
// caused by the one edit the test makes.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/content_policy.h"
#include "edgeshare/runtime/core/sha256.h"
#include "edgeshare/runtime/data_loader/buffer_data_loader.h"
#include "edgeshare/runtime/data_loader/file_data_loader.h"
#include "edgeshare/runtime/executor/external_constants.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/format/file_header.h"
#include "edgeshare/runtime/named_data/flat_tensor_data_map.h"
#include "edgeshare/schema/flat_tensor_generated.h"
#include "edgeshare/schema/program_generated.h"
#include "edgeshare/testing/test_files.h"

namespace edgeshare {
namespace runtime {
namespace {

namespace fb = ::edgeshare::schema;

constexpr uint64_t kSegmentAlignment = 64;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

void PutU64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }
uint64_t GetU64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, &b[at], 8);
  return v;
}

// A .pte: the header, `program` (its segments' offsets filled in here) and `segments`.
std::vector<uint8_t> Serialize(fb::ProgramT program,
                               const std::vector<std::vector<uint8_t>>& segments,
                               uint32_t declared_alignment = kSegmentAlignment) {
  std::vector<uint8_t> area;
  program.segments.clear();
  for (const std::vector<uint8_t>& segment : segments) {
    area.resize(AlignUp(area.size(), kSegmentAlignment), 0);
    program.segments.emplace_back(area.size(), segment.size());
    area.insert(area.end(), segment.begin(), segment.end());
  }
  program.segment_alignment = declared_alignment;
  program.version = kFormatVersion;
  flatbuffers::FlatBufferBuilder fbb;
  fb::FinishProgramBuffer(fbb, fb::Program::Pack(fbb, &program));
  const uint64_t base = AlignUp(kFileHeaderSize + fbb.GetSize(), kSegmentAlignment);
  std::vector<uint8_t> file(base + area.size(), 0);
  std::memcpy(file.data(), kProgramMagic, 4);
  const uint32_t version = kFormatVersion, header_size = kFileHeaderSize;
  std::memcpy(&file[4], &version, 4);
  std::memcpy(&file[8], &header_size, 4);
  PutU64(file, 16, kFileHeaderSize);
  PutU64(file, 24, fbb.GetSize());
  PutU64(file, 32, base);
  PutU64(file, 40, area.size());
  std::memcpy(&file[kFileHeaderSize], fbb.GetBufferPointer(), fbb.GetSize());
  if (!area.empty()) std::memcpy(&file[base], area.data(), area.size());
  return file;
}

// A program read back with the object API, and its segments' bytes.
struct Unpacked {
  std::unique_ptr<fb::ProgramT> program;
  std::vector<std::vector<uint8_t>> segments;
};

Unpacked Unpack(const std::vector<uint8_t>& file) {
  Unpacked out;
  const fb::Program* program = fb::GetProgram(file.data() + GetU64(file, 16));
  out.program.reset(program->UnPack());
  const uint64_t base = GetU64(file, 32);
  for (const fb::DataSegment& s : out.program->segments) {
    out.segments.emplace_back(file.begin() + base + s.offset(),
                              file.begin() + base + s.offset() + s.size());
  }
  return out;
}

std::unique_ptr<fb::EValueT> TensorValue(std::vector<int32_t> sizes) {
  fb::TensorT t;
  t.scalar_type = fb::ScalarType_FLOAT;
  t.dim_order.resize(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) t.dim_order[d] = static_cast<uint8_t>(d);
  t.sizes = std::move(sizes);
  auto value = std::make_unique<fb::EValueT>();
  value->val.Set(std::move(t));
  return value;
}

std::unique_ptr<fb::EValueT> PlannedValue(std::vector<int32_t> sizes, uint64_t offset) {
  auto value = TensorValue(std::move(sizes));
  value->val.AsTensor()->allocation = std::make_unique<fb::AllocationInfoT>();
  value->val.AsTensor()->allocation->memory_id = 1;
  value->val.AsTensor()->allocation->offset = offset;
  return value;
}

std::unique_ptr<fb::EValueT> ConstantValue(std::vector<int32_t> sizes, int32_t segment) {
  auto value = TensorValue(std::move(sizes));
  value->val.AsTensor()->constant_segment = segment;
  return value;
}

// Values of the handmade "forward": relu(x) of four floats, with a constant and an int at hand
// for the edits.
enum : uint32_t { kInput = 0, kConstant = 1, kOutput = 2, kInt = 3 };

// forward(x) = relu(x): x and the output planned, a constant of the same shape in segment 0,
// and an int value. KernelCall args are (input, output) by index.
std::unique_ptr<fb::ProgramT> ReluProgram(std::vector<uint32_t> args) {
  auto plan = std::make_unique<fb::ExecutionPlanT>();
  plan->name = "forward";
  plan->values.push_back(PlannedValue({4}, 0));
  plan->values.push_back(ConstantValue({4}, 0));
  plan->values.push_back(PlannedValue({4}, 16));
  auto int_value = std::make_unique<fb::EValueT>();
  fb::IntT seven;
  seven.int_val = 7;
  int_value->val.Set(seven);
  plan->values.push_back(std::move(int_value));
  plan->inputs = {kInput};
  plan->outputs = {kOutput};
  auto op = std::make_unique<fb::OperatorT>();
  op->name = "aten::relu";
  plan->operators.push_back(std::move(op));
  fb::KernelCallT call;
  call.op_index = 0;
  call.args = std::move(args);
  auto instruction = std::make_unique<fb::InstructionT>();
  instruction->instr_args.Set(std::move(call));
  plan->instructions.push_back(std::move(instruction));
  plan->non_const_buffer_sizes = {0, 32};
  auto program = std::make_unique<fb::ProgramT>();
  program->execution_plans.push_back(std::move(plan));
  return program;
}

const std::vector<std::vector<uint8_t>> kReluSegments = {std::vector<uint8_t>(16, 0)};

// A crafted file, its loader and its method "forward" (the loader must outlive the method).
struct Crafted {
  Crafted(std::vector<uint8_t> bytes, const char* name, const NamedDataMap* data = nullptr)
      : file(std::move(bytes)), loader(file.data(), file.size(), name), method(load(data)) {}

  Result<Method> load(const NamedDataMap* data) const {
    ES_ASSIGN_OR_RETURN(Program program, Program::load(&loader));
    return program.load_method("forward", data);  // The Method keeps the program image alive.
  }

  std::vector<uint8_t> file;
  BufferDataLoader loader;
  Result<Method> method;
};

// The message is one line and holds every expected piece.
void ExpectMessage(const Status& status, Error code, const std::vector<std::string>& pieces) {
  EXPECT_EQ(status.code(), code) << status.message();
  const std::string message = status.message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const std::string& piece : pieces) {
    EXPECT_NE(message.find(piece), std::string::npos) << "'" << piece << "' not in: " << message;
  }
}

TEST(CraftedFilesTest, TheCleanKernelProgramLoadsAndRuns) {
  Crafted crafted(Serialize(*ReluProgram({kInput, kOutput}), kReluSegments), "relu.pte");
  ASSERT_TRUE(crafted.method.ok()) << crafted.method.status().message();
  float x[4] = {-1, 2, -3, 4};
  ASSERT_TRUE(crafted.method->set_input(0, Tensor(ScalarType::Float, {4}, x)).ok());
  ASSERT_TRUE(crafted.method->execute().ok());
  const float* y = crafted.method->output(0)->data<float>();
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[3], 4.0f);
}

// relu writes its output into the constant in segment 0: a kernel registers how many of its
// args are inputs, so the runtime knows arg 1 is written whatever the file says.
TEST(CraftedFilesTest, AKernelWritingAConstantIsRejectedAtLoad) {
  Crafted crafted(Serialize(*ReluProgram({kInput, kConstant}), kReluSegments), "relu.pte");
  ASSERT_FALSE(crafted.method.ok());
  ExpectMessage(
      crafted.method.status(), Error::InvalidProgram,
      {"relu.pte", "'forward'", "instruction 0 (aten::relu)", "argument 1", "value 1", "constant"});
}

// The same with a constant from a data file (the shared foundation, mapped read-only).
TEST(CraftedFilesTest, AKernelWritingADataFileConstantIsRejectedAtLoad) {
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  BufferDataLoader ptd_loader(ptd.data(), ptd.size(), "foundation.ptd");
  auto foundation = FlatTensorDataMap::load(&ptd_loader);
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  const char* key = *foundation->get_key(0);
  const TensorLayout layout = *foundation->get_tensor_layout(key);
  std::vector<int32_t> sizes(layout.sizes.begin(), layout.sizes.end());

  auto program = ReluProgram({kInput, kConstant});
  fb::ExecutionPlanT& plan = *program->execution_plans[0];
  plan.values[kConstant] = TensorValue(sizes);
  plan.values[kConstant]->val.AsTensor()->external_key = key;
  Crafted crafted(Serialize(*program, kReluSegments), "relu.pte", &*foundation);
  ASSERT_FALSE(crafted.method.ok());
  ExpectMessage(crafted.method.status(), Error::InvalidProgram,
                {"relu.pte", "'forward'", "instruction 0 (aten::relu)", "argument 1", "constant"});
}

// foundation.ptd with entry `index`'s dim order reversed (a permuted layout, digests unchanged).
std::vector<uint8_t> PermutedFoundation(const std::vector<uint8_t>& ptd, size_t index) {
  const uint64_t fb_offset = GetU64(ptd, 16), base = GetU64(ptd, 32), size = GetU64(ptd, 40);
  std::unique_ptr<fb::FlatTensorT> file(fb::GetFlatTensor(ptd.data() + fb_offset)->UnPack());
  auto& order = file->named_data[index]->tensor_layout->dim_order;
  std::reverse(order.begin(), order.end());
  flatbuffers::FlatBufferBuilder fbb;
  fb::FinishFlatTensorBuffer(fbb, fb::CreateFlatTensor(fbb, file.get()));
  const uint64_t new_base = AlignUp(kFileHeaderSize + fbb.GetSize(), file->tensor_alignment);
  std::vector<uint8_t> out(new_base + size, 0);
  std::memcpy(out.data(), ptd.data(), kFileHeaderSize);
  PutU64(out, 16, kFileHeaderSize);
  PutU64(out, 24, fbb.GetSize());
  PutU64(out, 32, new_base);
  std::memcpy(&out[kFileHeaderSize], fbb.GetBufferPointer(), fbb.GetSize());
  std::memcpy(&out[new_base], &ptd[base], size);
  return out;
}

// A constant the data file lays out in another dim order would be read as the wrong numbers.
TEST(CraftedFilesTest, ADataFileConstantInAnotherDimOrderIsRejectedAtLoad) {
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  ASSERT_FALSE(ptd.empty());
  size_t index = 0;  // a rank-2 entry (a weight), whose reversed order is a real permutation
  {
    BufferDataLoader loader(ptd.data(), ptd.size(), "foundation.ptd");
    auto map = FlatTensorDataMap::load(&loader);
    ASSERT_TRUE(map.ok()) << map.status().message();
    while (index < map->get_num_keys() &&
           map->get_tensor_layout(*map->get_key(index))->sizes.size() != 2) {
      ++index;
    }
    ASSERT_LT(index, map->get_num_keys());
  }
  const std::vector<uint8_t> permuted = PermutedFoundation(ptd, index);
  BufferDataLoader ptd_loader(permuted.data(), permuted.size(), "permuted.ptd");
  auto foundation = FlatTensorDataMap::load(&ptd_loader);
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  const char* key = *foundation->get_key(index);
  const TensorLayout layout = *foundation->get_tensor_layout(key);
  std::vector<int32_t> sizes(layout.sizes.begin(), layout.sizes.end());

  auto program = ReluProgram({kConstant, kOutput});
  fb::ExecutionPlanT& plan = *program->execution_plans[0];
  plan.values[kConstant] = TensorValue(sizes);
  plan.values[kConstant]->val.AsTensor()->external_key = key;
  plan.values[kOutput] = PlannedValue(sizes, 0);
  plan.non_const_buffer_sizes = {0, std::max<uint64_t>(32, layout.nbytes())};
  Crafted crafted(Serialize(*program, kReluSegments), "relu.pte", &*foundation);
  ASSERT_FALSE(crafted.method.ok());
  ExpectMessage(crafted.method.status(), Error::InvalidData,
                {"relu.pte", "permuted.ptd", std::string("'") + key + "'", "dim order"});
}

// The exporter gives every output fresh planned memory and keeps inputs live for the whole method
// (a caller may set them once and execute many times), so no call may write a method input.
TEST(CraftedFilesTest, AKernelWritingAMethodInputIsRejectedAtLoad) {
  Crafted crafted(Serialize(*ReluProgram({kInput, kInput}), kReluSegments), "relu.pte");
  ASSERT_FALSE(crafted.method.ok());
  ExpectMessage(
      crafted.method.status(), Error::InvalidProgram,
      {"relu.pte", "'forward'", "instruction 0 (aten::relu)", "argument 1", "input of the method"});
}

TEST(CraftedFilesTest, AKernelWritingAScalarIsRejectedAtLoad) {
  Crafted crafted(Serialize(*ReluProgram({kInput, kInt}), kReluSegments), "relu.pte");
  ASSERT_FALSE(crafted.method.ok());
  ExpectMessage(
      crafted.method.status(), Error::InvalidProgram,
      {"relu.pte", "'forward'", "instruction 0 (aten::relu)", "argument 1", "not a tensor"});
}

// Segments are laid out 64-aligned; a file that declares another alignment is not what it says.
TEST(CraftedFilesTest, SegmentsNotAlignedAsDeclaredAreRejected) {
  std::vector<std::vector<uint8_t>> segments = kReluSegments;
  segments.emplace_back(16, 0);  // the second segment sits at offset 64
  for (uint32_t declared : {48u, 128u}) {
    const std::vector<uint8_t> file =
        Serialize(*ReluProgram({kInput, kOutput}), segments, declared);
    BufferDataLoader loader(file.data(), file.size(), "aligned.pte");
    Result<Program> program = Program::load(&loader);
    ASSERT_FALSE(program.ok()) << declared;
    ExpectMessage(program.status(), Error::InvalidProgram,
                  {"aligned.pte", declared == 48 ? "not a power of two" : "not 128-aligned"});
  }
}

TEST(CraftedFilesTest, AKernelCallWithoutAllItsInputsIsRejectedAtLoad) {
  auto program = ReluProgram({});
  program->execution_plans[0]->operators[0]->name = "aten::add";
  program->execution_plans[0]->operators[0]->overload = "Tensor";
  // add.Tensor(self, other, alpha) -> out: four args, given two.
  program->execution_plans[0]->instructions[0]->instr_args.AsKernelCall()->args = {kInput, kOutput};
  Crafted crafted(Serialize(*program, kReluSegments), "add.pte");
  ASSERT_FALSE(crafted.method.ok());
  ExpectMessage(crafted.method.status(), Error::InvalidProgram,
                {"add.pte", "'forward'", "instruction 0 (aten::add)", "2 arguments",
                 "fewer than its 3 inputs"});
}

// A scalar where relu expects a tensor loads (kinds of inputs are the kernel's to check) and
// fails at execute with an error, never by reading the wrong union member.
TEST(CraftedFilesTest, AScalarWhereAKernelWantsATensorFailsAtExecute) {
  Crafted crafted(Serialize(*ReluProgram({kInt, kOutput}), kReluSegments), "relu.pte");
  ASSERT_TRUE(crafted.method.ok()) << crafted.method.status().message();
  ExpectMessage(
      crafted.method->execute(), Error::InvalidProgram,
      {"relu.pte", "'forward'", "instruction 0 (aten::relu)", "argument 0", "must be a tensor"});
}

// The demo's lora_a.pte is one XNNPACK call (x, out); here its output is turned into a constant in
// a new segment. The backend says, from its own graph, that only arg 0 is an input.
TEST(CraftedFilesTest, ADelegateWritingAConstantIsRejectedAtLoad) {
  const std::vector<uint8_t> pte = fixtures::read_file(fixtures::env_path("LORA_A_PTE"));
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  BufferDataLoader ptd_loader(ptd.data(), ptd.size(), "foundation.ptd");
  auto foundation = FlatTensorDataMap::load(&ptd_loader);
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  Unpacked unpacked = Unpack(pte);
  {
    Crafted clean(Serialize(*unpacked.program, unpacked.segments), "lora_a.pte", &*foundation);
    ASSERT_TRUE(clean.method.ok()) << clean.method.status().message();
  }

  fb::ExecutionPlanT& plan = *unpacked.program->execution_plans[0];
  ASSERT_EQ(plan.instructions.size(), 1u);
  const fb::DelegateCallT* call = plan.instructions[0]->instr_args.AsDelegateCall();
  ASSERT_NE(call, nullptr);
  const uint32_t output = call->args.back();
  fb::TensorT* tensor = plan.values[output]->val.AsTensor();
  ASSERT_NE(tensor, nullptr);
  size_t nbytes = sizeof(float);
  for (int32_t s : tensor->sizes) nbytes *= static_cast<size_t>(s);
  tensor->allocation.reset();
  tensor->constant_segment = static_cast<int32_t>(unpacked.segments.size());
  unpacked.segments.emplace_back(nbytes, 0);
  const std::string arg = "argument " + std::to_string(call->args.size() - 1);
  const std::string value = "value " + std::to_string(output);

  Crafted crafted(Serialize(*unpacked.program, unpacked.segments), "lora_a.pte", &*foundation);
  ASSERT_FALSE(crafted.method.ok());
  ExpectMessage(
      crafted.method.status(), Error::InvalidProgram,
      {"lora_a.pte", "'forward'", "instruction 0 (XnnpackBackend)", arg, value, "constant"});
}

// Dynamic dims (a program exported with a dynamic token count): the planned sizes are the
// bound, set_input takes any size from 1 to it on a dynamic dim, and kernels resize their outputs.
TEST(CraftedFilesTest, ADynamicInputTakesAnySizeWithinItsBound) {
  auto program = ReluProgram({kInput, kOutput});
  fb::ExecutionPlanT& plan = *program->execution_plans[0];
  plan.values[kInput]->val.AsTensor()->dynamic_dims = {0};
  plan.values[kOutput]->val.AsTensor()->dynamic_dims = {0};
  Crafted crafted(Serialize(*program, kReluSegments), "relu.pte");
  ASSERT_TRUE(crafted.method.ok()) << crafted.method.status().message();
  Method& method = *crafted.method;
  float x[4] = {-1, 2, -3, 4};
  for (int32_t n : {3, 1, 4}) {
    ASSERT_TRUE(method.set_input(0, Tensor(ScalarType::Float, {n}, x)).ok());
    ASSERT_TRUE(method.execute().ok());
    Tensor y = *method.output(0);
    ASSERT_EQ(y.dim(), 1u);
    EXPECT_EQ(y.size(0), n);
    EXPECT_EQ(y.data<float>()[n - 1], std::max(0.0f, x[n - 1]));
  }
  ExpectMessage(method.set_input(0, Tensor(ScalarType::Float, {5}, x)), Error::InvalidArgument,
                {"input 0", "'forward'", "dim 0 is 5", "1..4"});
  ExpectMessage(method.set_input(0, Tensor(ScalarType::Float, {0}, x)), Error::InvalidArgument,
                {"dim 0 is 0", "1..4"});
  // A failed set_input changes nothing: the last good size stays.
  EXPECT_EQ(method.input(0)->size(0), 4);
}

TEST(CraftedFilesTest, AStaticInputStillNeedsItsExactShape) {
  Crafted crafted(Serialize(*ReluProgram({kInput, kOutput}), kReluSegments), "relu.pte");
  ASSERT_TRUE(crafted.method.ok()) << crafted.method.status().message();
  float x[4] = {};
  ExpectMessage(crafted.method->set_input(0, Tensor(ScalarType::Float, {3}, x)),
                Error::InvalidArgument, {"input 0", "shape [4]", "not [3]"});
}

TEST(CraftedFilesTest, DynamicDimsOnAConstantOrPastTheRankAreRejectedAtLoad) {
  auto on_constant = ReluProgram({kInput, kOutput});
  on_constant->execution_plans[0]->values[kConstant]->val.AsTensor()->dynamic_dims = {0};
  Crafted constant(Serialize(*on_constant, kReluSegments), "relu.pte");
  ASSERT_FALSE(constant.method.ok());
  ExpectMessage(constant.method.status(), Error::InvalidProgram,
                {"relu.pte", "value 1", "constant with dynamic dims"});

  auto past_rank = ReluProgram({kInput, kOutput});
  past_rank->execution_plans[0]->values[kInput]->val.AsTensor()->dynamic_dims = {1};
  Crafted rank(Serialize(*past_rank, kReluSegments), "relu.pte");
  ASSERT_FALSE(rank.method.ok());
  ExpectMessage(rank.method.status(), Error::InvalidProgram, {"value 0", "dynamic dim 1 of 1"});
}

std::unique_ptr<fb::EValueT> ListValue(std::vector<uint32_t> items, bool sym) {
  auto value = std::make_unique<fb::EValueT>();
  if (sym) {
    fb::SymIntListT list;
    list.items = std::move(items);
    value->val.Set(std::move(list));
  } else {
    fb::ValueListT list;
    list.items = std::move(items);
    value->val.Set(std::move(list));
  }
  return value;
}

// List items are other values of the plan: in range, and of the kind the list holds.
TEST(CraftedFilesTest, ListsNamingMissingOrWrongValuesAreRejectedAtLoad) {
  struct Case {
    std::vector<uint32_t> items;
    bool sym;
    std::string piece;
  };
  const Case cases[] = {
      {{kInput, 99}, false, "item 1 names value 99"},
      {{kInput, kInt}, false, "item 1 (value 3) is neither a tensor nor None"},
      {{kInt, kInput}, true, "item 1 (value 0) is not an Int"},
      {{kInt, 4}, true, "item 1 (value 4) is not an Int"},
  };
  for (const Case& c : cases) {
    auto program = ReluProgram({kInput, kOutput});
    program->execution_plans[0]->values.push_back(ListValue(c.items, c.sym));
    Crafted crafted(Serialize(*program, kReluSegments), "lists.pte");
    ASSERT_FALSE(crafted.method.ok()) << c.piece;
    ExpectMessage(crafted.method.status(), Error::InvalidProgram,
                  {"lists.pte", "value 4", c.piece});
  }
}

// State (a KV cache kept across executes): planned memory set to its initial bytes at load and by
// reset_state(); never a constant, an input or a tensor of dynamic shape.
TEST(CraftedFilesTest, StateStartsAtItsInitialBytesAndResets) {
  auto program = ReluProgram({kInput, kOutput});
  fb::ExecutionPlanT& plan = *program->execution_plans[0];
  auto state = std::make_unique<fb::StateBufferT>();
  state->value = kOutput;
  state->initial_segment = 1;
  plan.state.push_back(std::move(state));
  std::vector<std::vector<uint8_t>> segments = kReluSegments;
  const float initial[4] = {1, 2, 3, 4};
  segments.emplace_back(reinterpret_cast<const uint8_t*>(initial),
                        reinterpret_cast<const uint8_t*>(initial) + sizeof(initial));
  Crafted crafted(Serialize(*program, segments), "state.pte");
  ASSERT_TRUE(crafted.method.ok()) << crafted.method.status().message();
  Method& method = *crafted.method;
  EXPECT_EQ(method.num_state(), 1u);
  EXPECT_EQ(method.output(0)->data<float>()[2], 3.0f);
  float x[4] = {-1, -1, -1, -1};
  ASSERT_TRUE(method.set_input(0, Tensor(ScalarType::Float, {4}, x)).ok());
  ASSERT_TRUE(method.execute().ok());
  EXPECT_EQ(method.output(0)->data<float>()[2], 0.0f);
  method.reset_state();
  EXPECT_EQ(method.output(0)->data<float>()[2], 3.0f);
}

TEST(CraftedFilesTest, StateThatIsNotPlannedMemoryOrHasTheWrongBytesIsRejectedAtLoad) {
  struct Case {
    uint32_t value;
    int32_t segment;
    std::string piece;
  };
  const Case cases[] = {
      {kConstant, -1, "state 0 (value 1) is not a planned tensor"},
      {kInt, -1, "state 0 (value 3) is not a planned tensor"},
      {kInput, -1, "state 0 (value 0) is an input of the method"},
      {77, -1, "state 0 names value 77"},
      {kOutput, 1, "state 0 needs 16 initial bytes but its segment holds 12"},
      {kOutput, 5, "state 0 names segment 5"},
  };
  for (const Case& c : cases) {
    auto program = ReluProgram({kInput, kOutput});
    auto state = std::make_unique<fb::StateBufferT>();
    state->value = c.value;
    state->initial_segment = c.segment;
    program->execution_plans[0]->state.push_back(std::move(state));
    std::vector<std::vector<uint8_t>> segments = kReluSegments;
    segments.emplace_back(12, 0);
    Crafted crafted(Serialize(*program, segments), "state.pte");
    ASSERT_FALSE(crafted.method.ok()) << c.piece;
    ExpectMessage(crafted.method.status(), Error::InvalidProgram, {"state.pte", c.piece});
  }
}

// foundation.ptd with entry `index`'s bytes replaced by `bytes` (same size) and its digest updated.
std::vector<uint8_t> WithEntryBytes(const std::vector<uint8_t>& ptd, size_t index,
                                    const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> out = ptd;
  const uint64_t fb_offset = GetU64(ptd, 16), base = GetU64(ptd, 32);
  std::unique_ptr<fb::FlatTensorT> file(fb::GetFlatTensor(ptd.data() + fb_offset)->UnPack());
  const fb::DataSegment& segment = file->segments[file->named_data[index]->segment_index];
  EXPECT_EQ(segment.size(), bytes.size());
  std::memcpy(&out[base + segment.offset()], bytes.data(), bytes.size());
  const Digest digest = *sha256(bytes.data(), bytes.size());
  file->named_data[index]->digest.assign(digest.bytes.begin(), digest.bytes.end());
  flatbuffers::FlatBufferBuilder fbb;
  fb::FinishFlatTensorBuffer(fbb, fb::CreateFlatTensor(fbb, file.get()));
  EXPECT_LE(kFileHeaderSize + fbb.GetSize(), base);  // same size: the digest only changed bytes
  std::memcpy(&out[kFileHeaderSize], fbb.GetBufferPointer(), fbb.GetSize());
  PutU64(out, 24, fbb.GetSize());
  return out;
}

// foundation.ptd, and adapter_b.ptd: a copy whose first small rank-1 entry (a bias or a norm
// weight) holds i % 7 - 3 instead: two files of one structure for a program reading that entry.
struct TwoDataFiles {
  void Load() {
    ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
    ptd_loader = std::make_unique<BufferDataLoader>(ptd.data(), ptd.size(), "foundation.ptd");
    auto loaded = FlatTensorDataMap::load(ptd_loader.get());
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    foundation = std::make_shared<const FlatTensorDataMap>(std::move(*loaded));
    size_t index = 0;
    while (foundation->get_tensor_layout(*foundation->get_key(index))->sizes.size() != 1) ++index;
    key = *foundation->get_key(index);
    layout = *foundation->get_tensor_layout(key);
    sizes.assign(layout.sizes.begin(), layout.sizes.end());
    std::vector<uint8_t> other_bytes(layout.nbytes());
    for (size_t i = 0; i < other_bytes.size() / 4; ++i) {
      const float v = static_cast<float>(i % 7) - 3.0f;
      std::memcpy(&other_bytes[i * 4], &v, 4);
    }
    other_ptd = WithEntryBytes(ptd, index, other_bytes);
    other_loader =
        std::make_unique<BufferDataLoader>(other_ptd.data(), other_ptd.size(), "adapter_b.ptd");
    auto other_loaded = FlatTensorDataMap::load(other_loader.get());
    ASSERT_TRUE(other_loaded.ok()) << other_loaded.status().message();
    other = std::make_shared<const FlatTensorDataMap>(std::move(*other_loaded));
  }

  std::vector<uint8_t> ptd, other_ptd;
  std::unique_ptr<BufferDataLoader> ptd_loader, other_loader;
  std::shared_ptr<const FlatTensorDataMap> foundation, other;
  const char* key = nullptr;
  TensorLayout layout;
  std::vector<int32_t> sizes;
};

// Adapter swap: a constant the program left open (no digest) is re-pointed at another data file's
// bytes; one pinned by digest (a foundation weight) is refused, and a failed rebind changes
// nothing.
TEST(CraftedFilesTest, AnOpenExternalConstantRebindsToAnotherDataFile) {
  TwoDataFiles files;
  ASSERT_NO_FATAL_FAILURE(files.Load());
  const std::shared_ptr<const FlatTensorDataMap>& foundation = files.foundation;
  const std::shared_ptr<const FlatTensorDataMap>& other = files.other;
  const char* key = files.key;
  const TensorLayout& layout = files.layout;
  const std::vector<int32_t>& sizes = files.sizes;

  // relu(constant) with the constant open (no external_digest), then pinned.
  for (bool pinned : {false, true}) {
    auto program = ReluProgram({kConstant, kOutput});
    fb::ExecutionPlanT& plan = *program->execution_plans[0];
    plan.values[kConstant] = TensorValue(sizes);
    plan.values[kConstant]->val.AsTensor()->external_key = key;
    if (pinned) {
      const Digest d = *foundation->get_digest(key);
      plan.values[kConstant]->val.AsTensor()->external_digest.assign(d.bytes.begin(),
                                                                     d.bytes.end());
    }
    plan.values[kOutput] = PlannedValue(sizes, 0);
    plan.non_const_buffer_sizes = {0, std::max<uint64_t>(32, layout.nbytes())};
    Crafted crafted(Serialize(*program, kReluSegments), "lora.pte", &*foundation);
    ASSERT_TRUE(crafted.method.ok()) << crafted.method.status().message();
    Method& method = *crafted.method;
    ASSERT_TRUE(method.execute().ok());
    const float before = method.output(0)->data<float>()[3];
    const Status status = method.rebind_data(*other);
    if (pinned) {
      ExpectMessage(status, Error::InvalidArgument, {"adapter_b.ptd", key, "pins by digest"});
      ASSERT_TRUE(method.execute().ok());
      EXPECT_EQ(method.output(0)->data<float>()[3], before);  // unchanged
      continue;
    }
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_TRUE(method.execute().ok());
    EXPECT_EQ(method.output(0)->data<float>()[3], 0.0f);  // relu(3 % 7 - 3)
    EXPECT_EQ(method.output(0)->data<float>()[6], 3.0f);  // relu(6 % 7 - 3)
    ASSERT_TRUE(method.rebind_data(*foundation).ok());    // and back
    ASSERT_TRUE(method.execute().ok());
    EXPECT_EQ(method.output(0)->data<float>()[3], before);
  }
}

// `inner` without one key: an adapter file of another structure (a subset of the keys).
class WithoutKey final : public NamedDataMap {
 public:
  WithoutKey(const NamedDataMap& inner, std::string hidden) : inner_(inner), hidden_(hidden) {}
  Result<TensorLayout> get_tensor_layout(const char* key) const override {
    ES_RETURN_IF_ERROR(check(key));
    return inner_.get_tensor_layout(key);
  }
  Result<FreeableBuffer> get_data(const char* key) const override {
    ES_RETURN_IF_ERROR(check(key));
    return inner_.get_data(key);
  }
  Status load_data_into(const char* key, void* dst, size_t size) const override {
    ES_RETURN_IF_ERROR(check(key));
    return inner_.load_data_into(key, dst, size);
  }
  size_t get_num_keys() const override { return 0; }  // rebind_data asks by key only
  Result<const char*> get_key(size_t) const override {
    return Status::Format(Error::OutOfRange, "none");
  }
  Result<Digest> get_digest(const char* key) const override {
    ES_RETURN_IF_ERROR(check(key));
    return inner_.get_digest(key);
  }
  const char* name() const override { return "half_adapter.ptd"; }

 private:
  Status check(const char* key) const {
    return hidden_ == key ? Status::Format(Error::NotFound, "hidden") : Status();
  }
  const NamedDataMap& inner_;
  std::string hidden_;
};

// A file holding only some of a method's open constants is refused naming the one it lacks, and
// the method keeps every previous binding (half an adapter never runs with half of another).
TEST(CraftedFilesTest, RebindingOnlySomeOpenConstantsIsRefused) {
  const std::vector<uint8_t> ptd = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  BufferDataLoader ptd_loader(ptd.data(), ptd.size(), "foundation.ptd");
  auto foundation = FlatTensorDataMap::load(&ptd_loader);
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  std::vector<const char*> keys;  // two rank-1 entries of one size (biases or norm weights)
  std::vector<int32_t> sizes;
  for (size_t i = 0; i < foundation->get_num_keys() && keys.size() < 2; ++i) {
    const char* key = *foundation->get_key(i);
    const TensorLayout layout = *foundation->get_tensor_layout(key);
    if (layout.sizes.size() != 1 || (!sizes.empty() && layout.sizes[0] != sizes[0])) continue;
    sizes.assign(layout.sizes.begin(), layout.sizes.end());
    keys.push_back(key);
  }
  ASSERT_EQ(keys.size(), 2u);
  // relu(first constant); the int value becomes a second open constant nobody reads.
  auto program = ReluProgram({kConstant, kOutput});
  fb::ExecutionPlanT& plan = *program->execution_plans[0];
  plan.values[kConstant] = TensorValue(sizes);
  plan.values[kConstant]->val.AsTensor()->external_key = keys[0];
  plan.values[kInt] = TensorValue(sizes);
  plan.values[kInt]->val.AsTensor()->external_key = keys[1];
  plan.values[kOutput] = PlannedValue(sizes, 0);
  plan.non_const_buffer_sizes = {0, std::max<uint64_t>(32, sizes[0] * sizeof(float))};
  Crafted crafted(Serialize(*program, kReluSegments), "lora.pte", &*foundation);
  ASSERT_TRUE(crafted.method.ok()) << crafted.method.status().message();
  Method& method = *crafted.method;
  ASSERT_TRUE(method.execute().ok());
  const std::vector<float> before(method.output(0)->data<float>(),
                                  method.output(0)->data<float>() + sizes[0]);

  WithoutKey half(*foundation, keys[1]);
  ExpectMessage(method.rebind_data(half), Error::InvalidArgument,
                {"half_adapter.ptd", keys[1], "lacks", "another structure"});
  ASSERT_TRUE(method.execute().ok());
  EXPECT_EQ(std::vector<float>(method.output(0)->data<float>(),
                               method.output(0)->data<float>() + sizes[0]),
            before);
  EXPECT_TRUE(method.rebind_data(*foundation).ok());  // all of them: fine
}

// A remembered binding (rebind_data with a shared map): each map is fetched and checked at its first
// bind only; swapping back and forth then switches pointers (nothing fetched or hashed), still
// refuses half an adapter without touching the binding, and the Method keeps the maps alive.
TEST(CraftedFilesTest, RememberedBindingsSwitchByPointerAndFetchNothingAfterTheFirstBind) {
  TwoDataFiles files;
  ASSERT_NO_FATAL_FAILURE(files.Load());
  std::shared_ptr<const FlatTensorDataMap> foundation = files.foundation;
  std::shared_ptr<const FlatTensorDataMap> other = std::move(files.other);
  const char* key = files.key;
  const TensorLayout& layout = files.layout;
  const std::vector<int32_t>& sizes = files.sizes;

  auto program = ReluProgram({kConstant, kOutput});
  fb::ExecutionPlanT& plan = *program->execution_plans[0];
  plan.values[kConstant] = TensorValue(sizes);
  plan.values[kConstant]->val.AsTensor()->external_key = key;
  plan.values[kOutput] = PlannedValue(sizes, 0);
  plan.non_const_buffer_sizes = {0, std::max<uint64_t>(32, layout.nbytes())};
  Crafted crafted(Serialize(*program, kReluSegments), "lora.pte", &*foundation);
  ASSERT_TRUE(crafted.method.ok()) << crafted.method.status().message();
  Method& method = *crafted.method;
  ASSERT_TRUE(method.execute().ok());
  const float before = method.output(0)->data<float>()[3];
  ExpectMessage(method.rebind_data(std::shared_ptr<const NamedDataMap>()), Error::InvalidArgument,
                {"no data file"});

  reset_external_constant_stats();
  ASSERT_TRUE(method.rebind_data(other).ok());  // first binds: fetched and checked
  ASSERT_TRUE(method.rebind_data(foundation).ok());
  const ExternalConstantStats first = external_constant_stats();
  EXPECT_EQ(first.fetches, 2u);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(method.rebind_data(other).ok());
    ASSERT_TRUE(method.execute().ok());
    EXPECT_EQ(method.output(0)->data<float>()[3], 0.0f);  // relu(3 % 7 - 3)
    EXPECT_EQ(method.output(0)->data<float>()[6], 3.0f);  // relu(6 % 7 - 3)
    ASSERT_TRUE(method.rebind_data(foundation).ok());
    ASSERT_TRUE(method.execute().ok());
    EXPECT_EQ(method.output(0)->data<float>()[3], before);
  }
  const ExternalConstantStats later = external_constant_stats();
  EXPECT_EQ(later.fetches, first.fetches);
  EXPECT_EQ(later.verifications, first.verifications);
  EXPECT_EQ(later.verifications_remembered, first.verifications_remembered);

  // Half an adapter is refused at its first bind; the binding stays the foundation's.
  auto half = std::make_shared<const WithoutKey>(*foundation, key);
  ExpectMessage(method.rebind_data(half), Error::NotFound, {"half_adapter.ptd", "none"});
  ASSERT_TRUE(method.execute().ok());
  EXPECT_EQ(method.output(0)->data<float>()[3], before);
  // The Method holds the maps it remembers: they outlive every other holder.
  std::weak_ptr<const FlatTensorDataMap> watched = other;
  other.reset();
  EXPECT_FALSE(watched.expired());

  // A table made while verification was off is never used by a checked bind: it is made again,
  // its bytes fetched and checked.
  auto reloaded = FlatTensorDataMap::load(files.other_loader.get());
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().message();
  auto trusted = std::make_shared<const FlatTensorDataMap>(std::move(*reloaded));
  set_verify_content(false);
  const Status unchecked = method.rebind_data(trusted);
  set_verify_content(true);
  ASSERT_TRUE(unchecked.ok()) << unchecked.message();
  ASSERT_TRUE(method.rebind_data(foundation).ok());
  reset_external_constant_stats();
  ASSERT_TRUE(method.rebind_data(trusted).ok());
  EXPECT_EQ(external_constant_stats().fetches, 1u);
  EXPECT_EQ(external_constant_stats().verifications, 1u);
  ASSERT_TRUE(method.execute().ok());
  EXPECT_EQ(method.output(0)->data<float>()[6], 3.0f);
  reset_external_constant_stats();
  ASSERT_TRUE(method.rebind_data(foundation).ok());  // checked tables switch as before
  ASSERT_TRUE(method.rebind_data(trusted).ok());
  EXPECT_EQ(external_constant_stats().fetches, 0u);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
