// _edgeshare_runtime: the pybind11 half of the Python runtime. It converts arrays to runtime
// Tensors and back, releases the GIL around loading and running, and raises every runtime Status
// as edgeshare.extension.python.EdgeshareError(code, message). The public, typed API is runtime.py;
// the runtime work is loaded_program.{h,cc}.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/extension/python/loaded_batch.h"
#include "edgeshare/extension/python/loaded_program.h"
#include "edgeshare/generation/generator.h"
#include "edgeshare/runtime/core/error.h"
#include "edgeshare/runtime/executor/external_constants.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/tools/printable_text.h"

namespace py = pybind11;

namespace edgeshare {
namespace python {
namespace {

using runtime::DataFile;
using runtime::Error;
using runtime::Result;
using runtime::ScalarType;
using runtime::Status;
using runtime::Tensor;

// A failed runtime Status on its way to Python: translated into EdgeshareError.
struct Failure {
  Error code;
  std::string message;
};

void Check(const Status& status) {
  if (!status.ok()) throw Failure{status.code(), status.message()};
}

template <typename T>
T Unwrap(Result<T> result) {
  Check(result.status());
  return std::move(result).get();
}

// Python holds a data file through this: the runtime's process-wide DataFile stays open while any
// Python object or program refers to it.
struct OpenDataFile {
  std::shared_ptr<const DataFile> file;
};

// A method as Python sees it: it keeps its program (and so the program's data files) alive.
struct MethodHandle {
  std::shared_ptr<LoadedProgram> program;
  LoadedMethod* method;
};

// numpy's dtype for a runtime type; BFloat16 has none.
Result<py::dtype> DtypeOf(ScalarType type) {
  switch (type) {
    case ScalarType::Byte:
      return py::dtype::of<uint8_t>();
    case ScalarType::Char:
      return py::dtype::of<int8_t>();
    case ScalarType::Short:
      return py::dtype::of<int16_t>();
    case ScalarType::Int:
      return py::dtype::of<int32_t>();
    case ScalarType::Long:
      return py::dtype::of<int64_t>();
    case ScalarType::Half:
      return py::dtype("float16");
    case ScalarType::Float:
      return py::dtype::of<float>();
    case ScalarType::Double:
      return py::dtype::of<double>();
    case ScalarType::Bool:
      return py::dtype::of<bool>();
    case ScalarType::BFloat16:
      break;
  }
  return Status::Format(Error::NotSupported, "numpy has no dtype for %s", runtime::to_string(type));
}

// The runtime type of a numpy dtype in native byte order, or NotSupported.
Result<ScalarType> ScalarTypeOf(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const py::ssize_t size = dtype.itemsize();
  if (dtype.byteorder() == '>') return Error::NotSupported;
  if (kind == 'b' && size == 1) return ScalarType::Bool;
  if (kind == 'u' && size == 1) return ScalarType::Byte;
  if (kind == 'f') {
    if (size == 2) return ScalarType::Half;
    if (size == 4) return ScalarType::Float;
    if (size == 8) return ScalarType::Double;
  }
  if (kind == 'i') {
    if (size == 1) return ScalarType::Char;
    if (size == 2) return ScalarType::Short;
    if (size == 4) return ScalarType::Int;
    if (size == 8) return ScalarType::Long;
  }
  return Error::NotSupported;
}

// `value` as a C-contiguous array: numpy arrays as they are when contiguous, anything with the
// buffer protocol or __array__ (a CPU torch tensor) without importing its library.
py::array AsContiguousArray(const py::handle& value, size_t index, const LoadedMethod& method) {
  py::array array = py::array::ensure(value, py::array::c_style);
  if (array) return array;
  // ensure() swallows the reason (e.g. a torch tensor that requires grad); numpy tells it.
  std::string why = "not an array";
  try {
    py::module_::import("numpy").attr("ascontiguousarray")(value);
  } catch (py::error_already_set& error) {
    why = error.what();
  }
  throw Failure{Error::InvalidArgument, "input " + std::to_string(index) + " of method '" +
                                            method.name() + "' cannot be read as an array: " + why};
}

Tensor TensorOf(const py::array& array, size_t index, const LoadedMethod& method,
                std::vector<int32_t>& sizes) {
  const std::string what = "input " + std::to_string(index) + " of method '" + method.name() + "'";
  const Result<ScalarType> type = ScalarTypeOf(array.dtype());
  if (!type.ok()) {
    throw Failure{Error::InvalidArgument, what + " has dtype " +
                                              std::string(py::str(array.dtype())) +
                                              ", which the runtime has no type for"};
  }
  if (array.ndim() > static_cast<py::ssize_t>(Tensor::kMaxDims)) {
    throw Failure{Error::InvalidArgument, what + " has " + std::to_string(array.ndim()) +
                                              " dims; the runtime takes at most " +
                                              std::to_string(Tensor::kMaxDims)};
  }
  sizes.clear();
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    if (array.shape(d) > INT32_MAX) {
      throw Failure{Error::InvalidArgument, what + " is too large in dim " + std::to_string(d)};
    }
    sizes.push_back(static_cast<int32_t>(array.shape(d)));
  }
  // set_input only reads through the pointer; the runtime's Tensor has no const view.
  return Tensor(*type, runtime::Span<const int32_t>(sizes.data(), sizes.size()),
                const_cast<void*>(array.data()));
}

py::array ToNumpy(OwnedTensor&& tensor) {
  py::dtype dtype = Unwrap(DtypeOf(tensor.type));
  uint8_t* data = tensor.data.get();
  py::capsule owner(data, [](void* p) { delete[] static_cast<uint8_t*>(p); });
  tensor.data.release();  // The capsule frees it now, when numpy lets go of the array.
  return py::array(dtype, tensor.sizes, {}, data, owner);
}

std::vector<py::array> Execute(const MethodHandle& self, const py::args& args) {
  std::vector<py::array> arrays;  // Keeps every input's bytes alive while the GIL is released.
  std::vector<std::vector<int32_t>> sizes(args.size());
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    arrays.push_back(AsContiguousArray(args[i], i, *self.method));
    inputs.push_back(TensorOf(arrays.back(), i, *self.method, sizes[i]));
  }
  Result<std::vector<OwnedTensor>> outputs = Status(Error::Internal);
  {
    py::gil_scoped_release release;
    outputs = self.method->run(inputs);
  }
  std::vector<OwnedTensor> owned = Unwrap(std::move(outputs));
  std::vector<py::array> result;
  for (OwnedTensor& tensor : owned) result.push_back(ToNumpy(std::move(tensor)));
  return result;
}

// The prompt as int64 token ids: an array of shape [P] or [1, P] (numpy, a CPU torch tensor, ...).
py::array_t<int64_t> PromptIds(const py::handle& value, const LoadedMethod& method) {
  const std::string what = "the prompt ids of method '" + std::string(method.name()) + "'";
  py::array array = py::array::ensure(value, py::array::c_style);
  if (!array) throw Failure{Error::InvalidArgument, what + " cannot be read as an array"};
  const Result<ScalarType> type = ScalarTypeOf(array.dtype());
  if (!type.ok() || *type != ScalarType::Long) {
    throw Failure{Error::InvalidArgument,
                  what + " must be int64, not " + std::string(py::str(array.dtype()))};
  }
  if (!(array.ndim() == 1 || (array.ndim() == 2 && array.shape(0) == 1))) {
    throw Failure{Error::InvalidArgument, what + " must have shape [P] or [1, P]"};
  }
  return py::array_t<int64_t>(array);
}

// Generation options from Python's keyword arguments (runtime.py checks their types).
generation::GenerateOptions Options(int64_t max_new_tokens, const std::vector<int64_t>& stop_ids,
                                    double temperature, int64_t top_k, double top_p,
                                    double repetition_penalty, uint64_t seed,
                                    int64_t cached_tokens) {
  if (max_new_tokens < 0) {
    throw Failure{Error::InvalidArgument,
                  "generate(): max_new_tokens is " + std::to_string(max_new_tokens) + ", not >= 0"};
  }
  for (int64_t id : stop_ids) {
    if (id < 0) {
      throw Failure{Error::InvalidArgument,
                    "generate(): stop id " + std::to_string(id) + " is not a token id"};
    }
  }
  if (cached_tokens < 0) {
    throw Failure{Error::InvalidArgument,
                  "generate(): cached_tokens is " + std::to_string(cached_tokens) + ", not >= 0"};
  }
  if (top_k < 0) {
    throw Failure{Error::InvalidArgument,
                  "generate(): top_k is " + std::to_string(top_k) + ", not >= 0"};
  }
  generation::GenerateOptions options;
  options.max_new_tokens = static_cast<size_t>(max_new_tokens);
  options.stop_ids = stop_ids;
  options.sampling.temperature = static_cast<float>(temperature);
  options.sampling.top_k = static_cast<size_t>(top_k);
  options.sampling.top_p = static_cast<float>(top_p);
  options.sampling.repetition_penalty = static_cast<float>(repetition_penalty);
  options.sampling.seed = seed;
  options.cached_tokens = static_cast<size_t>(cached_tokens);
  return options;
}

py::tuple Generate(const MethodHandle& self, const py::handle& prompt_ids, int64_t max_new_tokens,
                   const std::vector<int64_t>& stop_ids, double temperature, int64_t top_k,
                   double top_p, double repetition_penalty, uint64_t seed, int64_t cached_tokens) {
  const generation::GenerateOptions options = Options(
      max_new_tokens, stop_ids, temperature, top_k, top_p, repetition_penalty, seed, cached_tokens);
  py::array_t<int64_t> ids = PromptIds(prompt_ids, *self.method);
  const runtime::Span<const int64_t> prompt(ids.data(), static_cast<size_t>(ids.size()));
  Result<generation::Generation> out = Status(Error::Internal);
  {
    py::gil_scoped_release release;
    out = self.method->generate(prompt, options);
  }
  generation::Generation generated = Unwrap(std::move(out));
  return py::make_tuple(
      py::cast(generated.tokens), generated.prefill_ms, generated.decode_tokens_per_s,
      generation::finish_reason_name(generated.finish_reason), generated.prefilled_tokens);
}

// Starts a streamed generation; returns the ticket next_token() takes.
uint64_t StartGeneration(const MethodHandle& self, const py::handle& prompt_ids,
                         int64_t max_new_tokens, const std::vector<int64_t>& stop_ids,
                         double temperature, int64_t top_k, double top_p, double repetition_penalty,
                         uint64_t seed, int64_t cached_tokens) {
  const generation::GenerateOptions options = Options(
      max_new_tokens, stop_ids, temperature, top_k, top_p, repetition_penalty, seed, cached_tokens);
  py::array_t<int64_t> ids = PromptIds(prompt_ids, *self.method);
  const runtime::Span<const int64_t> prompt(ids.data(), static_cast<size_t>(ids.size()));
  Result<uint64_t> ticket = Status(Error::Internal);
  {
    py::gil_scoped_release release;
    ticket = self.method->start(prompt, options);
  }
  return Unwrap(std::move(ticket));
}

// The stream's next token, or None once it is done.
std::optional<int64_t> NextToken(const MethodHandle& self, uint64_t ticket) {
  Result<int64_t> token = Status(Error::Internal);
  {
    py::gil_scoped_release release;
    token = self.method->next(ticket);
  }
  const int64_t value = Unwrap(std::move(token));
  if (value < 0) return std::nullopt;
  return value;
}

std::shared_ptr<LoadedBatch> OpenBatch(const std::string& folder, size_t threads, size_t max_queue,
                                       size_t prefill_chunk) {
  BatchOpenOptions options;
  options.threads = threads;
  options.max_queue = max_queue;
  options.prefill_chunk = prefill_chunk;
  Result<std::shared_ptr<LoadedBatch>> batch = Status(Error::Internal);
  {
    py::gil_scoped_release release;
    batch = LoadedBatch::open(folder, options);
  }
  return Unwrap(std::move(batch));
}

uint64_t SubmitBatch(LoadedBatch& self, const py::handle& prompt_ids, int64_t adapter,
                     int64_t max_new_tokens, const std::vector<int64_t>& stop_ids,
                     double temperature, int64_t top_k, double top_p, double repetition_penalty,
                     uint64_t seed) {
  const generation::GenerateOptions options =
      Options(max_new_tokens, stop_ids, temperature, top_k, top_p, repetition_penalty, seed, 0);
  py::array array = py::array::ensure(prompt_ids, py::array::c_style);
  const Result<ScalarType> type =
      array ? ScalarTypeOf(array.dtype()) : Result<ScalarType>(Error::NotSupported);
  if (!type.ok() || *type != ScalarType::Long ||
      !(array.ndim() == 1 || (array.ndim() == 2 && array.shape(0) == 1))) {
    throw Failure{Error::InvalidArgument,
                  "submit(): the prompt ids must be int64 of shape [P] or [1, P]"};
  }
  const auto* ids = static_cast<const int64_t*>(array.data());
  std::vector<int64_t> prompt(ids, ids + array.size());
  Result<uint64_t> id = Status(Error::Internal);
  {
    py::gil_scoped_release release;
    id = self.submit(std::move(prompt), adapter, options);
  }
  return Unwrap(std::move(id));
}

// The request's next token, or None once it ended.
std::optional<int64_t> NextBatchToken(LoadedBatch& self, uint64_t id) {
  Result<int64_t> token = Status(Error::Internal);
  {
    py::gil_scoped_release release;
    token = self.next(id);
  }
  const int64_t value = Unwrap(std::move(token));
  if (value < 0) return std::nullopt;
  return value;
}

py::tuple StreamTimings(const MethodHandle& self) {
  const generation::Generation out = self.method->timings();
  return py::make_tuple(out.prefill_ms, out.decode_tokens_per_s,
                        generation::finish_reason_name(out.finish_reason), out.prefilled_tokens);
}

py::object SpecToPython(const TensorSpec& spec) {
  if (!spec.is_tensor) return py::none();
  Result<py::dtype> dtype = DtypeOf(spec.type);
  return py::make_tuple(dtype.ok() ? py::object(*dtype) : py::str(runtime::to_string(spec.type)),
                        py::tuple(py::cast(spec.sizes)), py::tuple(py::cast(spec.dynamic_dims)));
}

py::list SpecsToPython(const std::vector<TensorSpec>& specs) {
  py::list list;
  for (const TensorSpec& spec : specs) list.append(SpecToPython(spec));
  return list;
}

std::shared_ptr<OpenDataFile> OpenData(const std::string& path) {
  Result<std::shared_ptr<const DataFile>> file = Status(Error::Internal);
  {
    py::gil_scoped_release release;
    file = DataFile::open(path.c_str());
  }
  return std::make_shared<OpenDataFile>(OpenDataFile{Unwrap(std::move(file))});
}

std::shared_ptr<LoadedProgram> LoadProgram(
    const std::string& path, const std::vector<std::shared_ptr<OpenDataFile>>& data_files,
    const std::vector<std::string>& methods, int64_t threads) {
  if (threads < 1) {
    throw Failure{Error::InvalidArgument, "Program.load(" + path + "): threads=" +
                                              std::to_string(threads) + ", at least 1 thread"};
  }
  std::vector<std::shared_ptr<const DataFile>> files;
  for (const std::shared_ptr<OpenDataFile>& data : data_files) {
    if (data == nullptr) throw Failure{Error::InvalidArgument, "a data file is None"};
    files.push_back(data->file);
  }
  Result<std::shared_ptr<LoadedProgram>> program = Status(Error::Internal);
  {
    py::gil_scoped_release release;
    program = LoadedProgram::load(path, std::move(files), methods, static_cast<size_t>(threads));
  }
  return Unwrap(std::move(program));
}

void BindAdapter(LoadedProgram& program, const std::shared_ptr<OpenDataFile>& adapter) {
  if (adapter == nullptr)
    throw Failure{Error::InvalidArgument, "bind_adapter: the adapter is None"};
  Status status;
  {
    py::gil_scoped_release release;
    status = program.bind_adapter(adapter->file);
  }
  Check(status);
}

MethodHandle FindMethod(const std::shared_ptr<LoadedProgram>& program, const std::string& name) {
  return MethodHandle{program, Unwrap(program->method(name))};
}

py::dict WeightsCacheStats() {
  const xnnpack::WeightsCacheStats stats = xnnpack::process_weights_cache_stats();
  const runtime::ExternalConstantStats external = runtime::external_constant_stats();
  py::dict constants;
  constants["fetches"] = external.fetches;
  constants["shared_hits"] = external.shared_hits;
  constants["verifications"] = external.verifications;
  constants["bytes_verified"] = external.bytes_verified;
  constants["verification_failures"] = external.verification_failures;
  constants["verifications_remembered"] = external.verifications_remembered;
  constants["live_entries"] = external.live_entries;
  py::dict dict;
  dict["packs"] = stats.packs;
  dict["cache_hits"] = stats.cache_hits;
  dict["bytes_fetched"] = stats.bytes_fetched;
  dict["packed_entries"] = stats.num_packed_entries;
  dict["named_data_fetches"] = stats.named_data_fetches;
  dict["verifications"] = stats.verifications;
  dict["bytes_verified"] = stats.bytes_verified;
  dict["verification_failures"] = stats.verification_failures;
  dict["external_constants"] = constants;
  dict["data_files_open"] = DataFile::open_count();
  dict["sharing"] = xnnpack::weight_sharing_enabled();
  dict["verify"] = xnnpack::verify_content_enabled();
  return dict;
}

void RegisterErrors(py::module_& m) {
  // The Python class lives in _errors.py so that it is an ordinary, documented Python class.
  static py::gil_safe_call_once_and_store<py::object> error_class;
  error_class.call_once_and_store_result([]() {
    return py::module_::import("edgeshare.extension.python._errors").attr("EdgeshareError");
  });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Failure& failure) {
      const py::object& cls = error_class.get_stored();
      // Escaped: a message may quote a corrupt file's bytes, which need not be UTF-8.
      py::object error =
          cls(runtime::to_string(failure.code), tools::printable_text(failure.message));
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });
}

void DefineClasses(py::module_& m) {
  py::class_<OpenDataFile, std::shared_ptr<OpenDataFile>>(m, "DataFile")
      .def_static("open", &OpenData, py::arg("path"))
      .def_property_readonly("path", [](const OpenDataFile& f) { return f.file->path(); });

  py::class_<LoadedProgram, std::shared_ptr<LoadedProgram>>(m, "Program")
      .def_static("load", &LoadProgram, py::arg("path"), py::arg("data_files"),
                  py::arg("methods") = std::vector<std::string>(), py::arg("threads") = 1)
      .def_property_readonly("path", &LoadedProgram::path)
      .def_property_readonly("method_names",
                             [](LoadedProgram& p) {
                               std::vector<std::string> names;
                               for (size_t i = 0; i < p.num_methods(); ++i) {
                                 names.push_back(p.method(i).name());
                               }
                               return names;
                             })
      .def("method", &FindMethod, py::arg("name"))
      .def("bind_adapter", &BindAdapter, py::arg("adapter"));

  py::class_<MethodHandle>(m, "Method")
      .def_property_readonly("name", [](const MethodHandle& h) { return h.method->name(); })
      .def_property_readonly(
          "inputs", [](const MethodHandle& h) { return SpecsToPython(h.method->inputs()); })
      .def_property_readonly(
          "outputs", [](const MethodHandle& h) { return SpecsToPython(h.method->outputs()); })
      .def("execute", &Execute)
      .def("generate", &Generate, py::arg("prompt_ids"), py::arg("max_new_tokens"),
           py::arg("stop_ids"), py::arg("temperature"), py::arg("top_k"), py::arg("top_p"),
           py::arg("repetition_penalty"), py::arg("seed"), py::arg("cached_tokens") = 0)
      .def("start_generation", &StartGeneration, py::arg("prompt_ids"), py::arg("max_new_tokens"),
           py::arg("stop_ids"), py::arg("temperature"), py::arg("top_k"), py::arg("top_p"),
           py::arg("repetition_penalty"), py::arg("seed"), py::arg("cached_tokens") = 0)
      .def("next_token", &NextToken, py::arg("ticket"))
      .def("stream_timings", &StreamTimings)
      .def("cached_length", [](const MethodHandle& h) { return h.method->cached_length(); });

  py::class_<LoadedBatch, std::shared_ptr<LoadedBatch>>(m, "BatchEngine")
      .def_static("open", &OpenBatch, py::arg("folder"), py::arg("threads"), py::arg("max_queue"),
                  py::arg("prefill_chunk"))
      .def_property_readonly("adapters", &LoadedBatch::adapters)
      .def_property_readonly("slots", [](const LoadedBatch& b) { return b.limits().slots; })
      .def_property_readonly("max_seq_len",
                             [](const LoadedBatch& b) { return b.limits().max_seq_len; })
      .def_property_readonly("adapter_slots",
                             [](const LoadedBatch& b) { return b.limits().adapter_slots; })
      .def_property_readonly("vocab_size", &LoadedBatch::vocab_size)
      .def("submit", &SubmitBatch, py::arg("prompt_ids"), py::arg("adapter"),
           py::arg("max_new_tokens"), py::arg("stop_ids"), py::arg("temperature"), py::arg("top_k"),
           py::arg("top_p"), py::arg("repetition_penalty"), py::arg("seed"))
      .def("next", &NextBatchToken, py::arg("id"))
      .def(
          "wait_changed",
          [](LoadedBatch& b, int64_t timeout_ms) {
            py::gil_scoped_release release;
            return b.wait_changed(timeout_ms);
          },
          py::arg("timeout_ms"))
      .def(
          "take",
          [](LoadedBatch& b, uint64_t id) {
            bool ended = false;
            std::vector<int64_t> tokens = Unwrap(b.take(id, &ended));
            return py::make_tuple(tokens, ended);
          },
          py::arg("id"))
      .def("finish_reason", &LoadedBatch::finish_reason, py::arg("id"))
      .def(
          "cancel", [](LoadedBatch& b, uint64_t id) { Check(b.cancel(id)); }, py::arg("id"))
      .def("release", &LoadedBatch::release, py::arg("id"))
      .def(
          "load_adapter",
          [](LoadedBatch& b, size_t slot, const std::string& path) {
            Status status;
            {
              py::gil_scoped_release release;
              status = b.load_adapter(slot, path);
            }
            Check(status);
          },
          py::arg("slot"), py::arg("path"))
      .def(
          "unload_adapter", [](LoadedBatch& b, size_t slot) { Check(b.unload_adapter(slot)); },
          py::arg("slot"))
      .def("adapter_loaded", &LoadedBatch::adapter_loaded, py::arg("slot"));
}

}  // namespace
}  // namespace python
}  // namespace edgeshare

PYBIND11_MODULE(_edgeshare_runtime, m) {
  using namespace edgeshare;
  m.doc() = "edgeshare's C++ runtime; use edgeshare.extension.python, not this module.";
  python::RegisterErrors(m);
  python::DefineClasses(m);
  m.def("weights_cache_stats", &python::WeightsCacheStats);
  m.def("set_verify_content", &xnnpack::set_verify_content, py::arg("enabled"));
  m.def("set_weight_sharing", &xnnpack::set_weight_sharing, py::arg("enabled"));
}
