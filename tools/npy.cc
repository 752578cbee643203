#include "edgeshare/tools/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "edgeshare/tools/printable_text.h"

namespace edgeshare {
namespace tools {
namespace {

using runtime::Error;
using runtime::Result;
using runtime::ScalarType;
using runtime::Status;

constexpr char kMagic[] = "\x93NUMPY";
// The most bytes of data an array may claim: far past any input a tool feeds, short of a size
// that could overflow or that no file here holds.
constexpr size_t kMaxDataBytes = size_t{1} << 40;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// The value of `'name': <value>` in the header dict, up to the next ',' at depth 0 or '}'.
std::string DictValue(const std::string& header, const char* name) {
  const std::string needle = std::string("'") + name + "'";
  size_t at = header.find(needle);
  if (at == std::string::npos) return "";
  at = header.find(':', at + needle.size());
  if (at == std::string::npos) return "";
  int depth = 0;
  size_t end = at + 1;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if ((c == ',' && depth == 0) || c == '}') break;
  }
  std::string value = header.substr(at + 1, end - at - 1);
  const size_t first = value.find_first_not_of(' ');
  const size_t last = value.find_last_not_of(' ');
  return first == std::string::npos ? "" : value.substr(first, last - first + 1);
}

}  // namespace

Result<NpyArray> read_npy(const std::string& path) {
  // O_NONBLOCK: a FIFO or a device is refused below instead of blocking the open; reads of a
  // regular file ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ES_CHECK_OR_RETURN_ERROR(fd >= 0, Error::AccessFailed, "cannot open %s: %s", path.c_str(),
                           std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Format(Error::AccessFailed, "cannot read %s: not a regular file", path.c_str());
  }
  File f(::fdopen(fd, "rb"));
  if (f == nullptr) {
    ::close(fd);
    return Status::Format(Error::AccessFailed, "cannot read %s: %s", path.c_str(),
                          std::strerror(errno));
  }
  const size_t file_size = static_cast<size_t>(st.st_size);
  unsigned char prefix[10];
  ES_CHECK_OR_RETURN_ERROR(
      std::fread(prefix, 1, 10, f.get()) == 10 && std::memcmp(prefix, kMagic, 6) == 0,
      Error::InvalidData, "%s is not a .npy file", path.c_str());
  ES_CHECK_OR_RETURN_ERROR(prefix[6] == 1, Error::InvalidData,
                           "%s: .npy version %d is not supported (1.0 is)", path.c_str(),
                           prefix[6]);
  const size_t header_size = prefix[8] | (prefix[9] << 8);
  ES_CHECK_OR_RETURN_ERROR(10 + header_size <= file_size, Error::InvalidData,
                           "%s: its .npy header claims %zu bytes; the file has %zu", path.c_str(),
                           header_size, file_size - 10);
  std::string header(header_size, '\0');
  ES_CHECK_OR_RETURN_ERROR(std::fread(&header[0], 1, header_size, f.get()) == header_size,
                           Error::InvalidData, "%s: truncated .npy header", path.c_str());
  NpyArray array;
  const std::string descr = DictValue(header, "descr");
  if (descr == "'<f4'") {
    array.dtype = ScalarType::Float;
  } else if (descr == "'<i8'") {
    array.dtype = ScalarType::Long;
  } else if (descr == "'<i4'") {
    array.dtype = ScalarType::Int;
  } else {
    return Status::Format(Error::InvalidData,
                          "%s: dtype %s is not supported (float32, int64, int32 are)", path.c_str(),
                          printable_text(descr, 64).c_str());
  }
  ES_CHECK_OR_RETURN_ERROR(DictValue(header, "fortran_order") == "False", Error::InvalidData,
                           "%s: Fortran-order arrays are not supported", path.c_str());
  const std::string shape = DictValue(header, "shape");
  const std::string shown = printable_text(shape, 64);
  ES_CHECK_OR_RETURN_ERROR(shape.size() >= 2 && shape.front() == '(' && shape.back() == ')',
                           Error::InvalidData, "%s: bad shape %s", path.c_str(), shown.c_str());
  const size_t item = runtime::element_size(array.dtype);
  size_t nbytes = item;
  const char* p = shape.c_str() + 1;
  while (*p != ')') {
    while (*p == ' ' || *p == ',') ++p;
    if (*p == ')') break;
    char* end = nullptr;
    errno = 0;
    const long dim = std::strtol(p, &end, 10);
    ES_CHECK_OR_RETURN_ERROR(end != p && dim >= 0, Error::InvalidData, "%s: bad shape %s",
                             path.c_str(), shown.c_str());
    ES_CHECK_OR_RETURN_ERROR(errno == 0 && dim <= INT32_MAX, Error::InvalidData,
                             "%s: shape %s has a dim past %d", path.c_str(), shown.c_str(),
                             INT32_MAX);
    ES_CHECK_OR_RETURN_ERROR(array.shape.size() < runtime::Tensor::kMaxDims, Error::InvalidData,
                             "%s: shape %s has more than %zu dims", path.c_str(), shown.c_str(),
                             runtime::Tensor::kMaxDims);
    array.shape.push_back(static_cast<int32_t>(dim));
    // Checked before multiplying: the claimed size never overflows, whatever the header says.
    ES_CHECK_OR_RETURN_ERROR(dim == 0 || nbytes <= kMaxDataBytes / static_cast<size_t>(dim),
                             Error::InvalidData, "%s: shape %s is too large", path.c_str(),
                             shown.c_str());
    nbytes *= static_cast<size_t>(dim);
    p = end;
  }
  // Before anything is allocated: the shape must fit in the bytes the file holds.
  const size_t data_bytes = file_size - 10 - header_size;
  ES_CHECK_OR_RETURN_ERROR(nbytes <= data_bytes, Error::InvalidData,
                           "%s: shape %s needs %zu bytes of data; the file holds %zu", path.c_str(),
                           shown.c_str(), nbytes, data_bytes);
  array.data.resize(nbytes);
  ES_CHECK_OR_RETURN_ERROR(
      std::fread(array.data.data(), 1, array.data.size(), f.get()) == array.data.size(),
      Error::InvalidData, "%s: holds fewer bytes than its shape %s needs", path.c_str(),
      shown.c_str());
  return array;
}

Status write_npy(const std::string& path, const runtime::Tensor& tensor) {
  const char* descr = nullptr;
  switch (tensor.scalar_type()) {
    case ScalarType::Float:
      descr = "<f4";
      break;
    case ScalarType::Long:
      descr = "<i8";
      break;
    case ScalarType::Int:
      descr = "<i4";
      break;
    default:
      return Status::Format(Error::NotSupported, "cannot write %s tensors to %s",
                            runtime::to_string(tensor.scalar_type()), path.c_str());
  }
  // NumPy spells shapes as Python tuples: "()", "(4,)", "(4, 256)".
  std::string shape = "(";
  for (size_t d = 0; d < tensor.dim(); ++d) {
    if (d > 0) shape += ", ";
    shape += std::to_string(tensor.size(d));
  }
  if (tensor.dim() == 1) shape += ",";
  shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad so that the data starts on a 64-byte boundary, as NumPy does.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  File f(std::fopen(path.c_str(), "wb"));
  ES_CHECK_OR_RETURN_ERROR(f != nullptr, Error::AccessFailed, "cannot write %s: %s", path.c_str(),
                           std::strerror(errno));
  unsigned char prefix[10];
  std::memcpy(prefix, kMagic, 6);
  prefix[6] = 1;
  prefix[7] = 0;
  prefix[8] = static_cast<unsigned char>(header.size() & 0xff);
  prefix[9] = static_cast<unsigned char>(header.size() >> 8);
  const bool ok = std::fwrite(prefix, 1, 10, f.get()) == 10 &&
                  std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
                  std::fwrite(tensor.const_data(), 1, tensor.nbytes(), f.get()) == tensor.nbytes();
  ES_CHECK_OR_RETURN_ERROR(ok, Error::AccessFailed, "cannot write %s", path.c_str());
  return Status();
}

}  // namespace tools
}  // namespace edgeshare
