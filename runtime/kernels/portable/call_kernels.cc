// call_kernels: runs registered kernels on values read from stdin and prints their outputs, so a
// Python test can compare single kernel calls with torch (kernels_vs_torch_test.py), lists and
// run-time sizes included, without an exporter in between. A test tool: it allocates freely.
//
// One call per line: the operator's name, its arguments, then `end`. An argument is
//   t <dtype> <rank> <sizes...> <values...>   an input tensor (dtype: ScalarType number)
//   o <dtype> <rank> <sizes...>               an output tensor planned at these sizes (capacity)
//   i <int> | d <double> | n                  an Int, a Double, None
//   io                                        an Int output (a size kernel's)
//   s <word>                                  a String (e.g. gelu's approximate)
//   il <count> <ints...>                      an int list
//   tl <count> <items...>                     a list whose items are `t ...` or `n`
// For each call one line: `ok` and per output ` <rank> <sizes...> <values...>` (a tensor) or
// ` i <value>` (an Int), or `error <code> <message>`.
//
//   echo 'aten::neg t 6 1 2 1.5 -2 o 6 1 2 end' | call_kernels   # prints: ok 1 2 -1.5 2

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/runtime/kernels/kernel_registry.h"

namespace edgeshare {
namespace runtime {
namespace {

// The values of one call; deques, so the lists' and tensors' pointers stay valid.
struct CallValues {
  std::deque<EValue> values;
  std::deque<std::vector<uint8_t>> buffers;
  std::deque<std::vector<int32_t>> sizes;
  std::deque<std::vector<int64_t>> int_lists;
  std::deque<std::string> strings;
  std::deque<std::vector<EValue*>> lists;
  std::deque<EValue> items;  // list items
  std::vector<EValue*> args;
  std::vector<const EValue*> outputs;
};

bool read_word(std::string* word) {
  char buffer[256];
  if (std::scanf("%255s", buffer) != 1) return false;
  *word = buffer;
  return true;
}

// Reads `<dtype> <rank> <sizes...>` and, for an input, the values; returns the tensor value.
bool read_tensor(CallValues& call, bool input, EValue* value) {
  int dtype = 0, rank = 0;
  if (std::scanf("%d %d", &dtype, &rank) != 2 || rank < 0 || rank > 8) return false;
  const ScalarType type = static_cast<ScalarType>(dtype);
  call.sizes.emplace_back(static_cast<size_t>(rank));
  size_t numel = 1;
  for (int32_t& s : call.sizes.back()) {
    if (std::scanf("%d", &s) != 1 || s < 0) return false;
    numel *= static_cast<size_t>(s);
  }
  call.buffers.emplace_back(numel * element_size(type) + 1, 0xff);
  void* data = call.buffers.back().data();
  for (size_t i = 0; input && i < numel; ++i) {
    double v = 0;
    if (std::scanf("%lf", &v) != 1) return false;
    if (type == ScalarType::Float) {
      static_cast<float*>(data)[i] = static_cast<float>(v);
    } else if (type == ScalarType::Half) {
      static_cast<uint16_t*>(data)[i] = kernels::float_to_half(static_cast<float>(v));
    } else if (type == ScalarType::Long) {
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v);
    } else if (type == ScalarType::Char) {
      static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v);
    } else if (type == ScalarType::Bool) {
      static_cast<bool*>(data)[i] = v != 0;
    } else {
      return false;
    }
  }
  const std::vector<int32_t>& sizes = call.sizes.back();
  *value = EValue(Tensor(type, Span<const int32_t>(sizes.data(), sizes.size()), data));
  return true;
}

bool read_list(CallValues& call, EValue* value) {
  size_t count = 0;
  if (std::scanf("%zu", &count) != 1) return false;
  std::vector<EValue*> pointers;
  for (size_t k = 0; k < count; ++k) {
    std::string kind;
    if (!read_word(&kind)) return false;
    call.items.emplace_back();
    if (kind == "t" && !read_tensor(call, true, &call.items.back())) return false;
    if (kind != "t" && kind != "n") return false;
    pointers.push_back(&call.items.back());
  }
  call.lists.push_back(std::move(pointers));
  *value = EValue(Span<EValue* const>(call.lists.back().data(), call.lists.back().size()));
  return true;
}

bool read_int_list(CallValues& call, EValue* value) {
  size_t count = 0;
  if (std::scanf("%zu", &count) != 1) return false;
  call.int_lists.emplace_back(count);
  for (int64_t& v : call.int_lists.back()) {
    long long x = 0;
    if (std::scanf("%lld", &x) != 1) return false;
    v = x;
  }
  *value = EValue(Span<const int64_t>(call.int_lists.back().data(), count));
  return true;
}

// Reads the arguments up to `end`; false on malformed input.
bool read_args(CallValues& call) {
  std::string kind;
  while (read_word(&kind) && kind != "end") {
    EValue value;
    bool ok = true;
    if (kind == "t" || kind == "o") {
      ok = read_tensor(call, kind == "t", &value);
    } else if (kind == "i") {
      long long v = 0;
      ok = std::scanf("%lld", &v) == 1;
      value = EValue(static_cast<int64_t>(v));
    } else if (kind == "d") {
      double v = 0;
      ok = std::scanf("%lf", &v) == 1;
      value = EValue(v);
    } else if (kind == "s") {
      ok = read_word(&call.strings.emplace_back());
      value = EValue(call.strings.back().c_str());
    } else if (kind == "io") {
      value = EValue(static_cast<int64_t>(0));
    } else if (kind == "il") {
      ok = read_int_list(call, &value);
    } else if (kind == "tl") {
      ok = read_list(call, &value);
    } else if (kind != "n") {
      ok = false;
    }
    if (!ok) return false;
    call.values.push_back(value);
    call.args.push_back(&call.values.back());
    if (kind == "o" || kind == "io") call.outputs.push_back(&call.values.back());
  }
  return kind == "end";
}

void print_tensor(const Tensor& t) {
  std::printf(" %zu", t.dim());
  for (size_t d = 0; d < t.dim(); ++d) std::printf(" %d", t.size(d));
  for (size_t i = 0; i < t.numel(); ++i) {
    if (t.scalar_type() == ScalarType::Float) {
      std::printf(" %.9g", t.data<float>()[i]);
    } else if (t.scalar_type() == ScalarType::Long) {
      std::printf(" %lld", static_cast<long long>(t.data<int64_t>()[i]));
    } else {
      std::printf(" %d", t.data<bool>()[i] ? 1 : 0);
    }
  }
}

int run() {
  std::string op;
  while (read_word(&op)) {
    CallValues call;
    if (!read_args(call)) {
      std::fprintf(stderr, "call_kernels: malformed call of %s\n", op.c_str());
      return 2;
    }
    const Kernel kernel = get_kernel(op.c_str());
    if (!kernel) {
      std::printf("error %u no kernel %s\n", static_cast<unsigned>(Error::NotFound), op.c_str());
      continue;
    }
    const Status status = kernel.fn(Span<EValue* const>(call.args.data(), call.args.size()));
    if (!status.ok()) {
      std::printf("error %u %s\n", static_cast<unsigned>(status.code()), status.message());
      continue;
    }
    std::printf("ok");
    for (const EValue* out : call.outputs) {
      if (out->is_int()) {
        std::printf(" i %lld", static_cast<long long>(out->to_int()));
      } else {
        print_tensor(out->to_tensor());
      }
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare

int main() { return edgeshare::runtime::run(); }
