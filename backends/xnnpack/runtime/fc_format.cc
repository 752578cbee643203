#include "edgeshare/backends/xnnpack/runtime/fc_format.h"

#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"
#include "edgeshare/runtime/kernels/portable/gemm_nt.h"

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::ScalarType;
using runtime::Status;

namespace {

// xnnpack_graph.fbs's QuantScheme values (fc_format_rows_test.py checks them against the schema).
constexpr int8_t kSchemeNone = 0;
constexpr int8_t kSchemeQC8W = 1;
constexpr int8_t kSchemeQC4W = 2;
constexpr int8_t kSchemeQB8W = 3;
constexpr int8_t kSchemeQB5W = 4;

constexpr size_t kScratchPartAlignment = 64;

size_t align_scratch_part(size_t bytes) {
  return (bytes + kScratchPartAlignment - 1) / kScratchPartAlignment * kScratchPartAlignment;
}

// The quantized rows, then their blocks' scales and sums.
QuantizedScratchLayout quantized_layout(size_t max_rows, const FcShape& s) {
  const size_t blocks = max_rows * kernels::act_blocks(s.k);
  QuantizedScratchLayout layout;
  layout.max_rows = max_rows;
  layout.scales = align_scratch_part(max_rows * kernels::qc8_padded_k(s.k));
  layout.sums = layout.scales + align_scratch_part(blocks * sizeof(float));
  layout.bytes = layout.sums + align_scratch_part(blocks * sizeof(int32_t));
  return layout;
}

QuantizedScratchLayout no_scratch(size_t, const FcShape&) { return QuantizedScratchLayout(); }

// --- f32: XNNPACK packs and runs it (PackedOperator), the delegate's kernels read its packing.

void settle_f32() { (void)kernels::f32_kernel_sets(); }

// --- f16w: half weight and bias, f32 activations.

size_t f16w_tile_bytes(const FcShape& s) { return kernels::f16w_tile_bytes(s.k); }

void f16w_pack(const FcShape& s, size_t first, size_t count, const void* weight, const void* bias,
               const void*, void* packed) {
  kernels::f16w_pack(static_cast<const uint16_t*>(weight) + first * s.k,
                     bias != nullptr ? static_cast<const uint16_t*>(bias) + first : nullptr, s.k,
                     count, packed);
}

void settle_f16w() { (void)kernels::f16w_kernel_sets(); }

Status f16w_check_slab(const FcShape& s, const FcSlab& slab) {
  return kernels::check_f16w_kernel_args(s.k, slab.count, slab.packed, slab.packed_bytes);
}

bool f16w_run_slab(const FcShape& s, const FcSlab& slab, const FcRows& r, const FcSlab* next,
                   bool first) {
  const kernels::F16WKernels& set = kernels::f16w_kernel_sets().best();
  float* y = r.y + slab.first;
  if (r.rows == 1) {
    set.gemv(slab.packed, s.k, slab.count, r.x, y);
    return true;
  }
  // The slab before came with this one prefetched; the first is read here.
  if (first && r.rows >= kTouchMinRows) touch(slab.packed, slab.packed_bytes);
  set.gemm(slab.packed, s.k, slab.count, r.rows, r.x, s.k, y, s.n,
           next != nullptr ? next->packed : nullptr, next != nullptr ? next->packed_bytes : 0);
  return true;
}

// --- qc8w: int8 per output row, float scales and bias; activations int8 in blocks of 32.

size_t qc8w_tile_bytes(const FcShape& s) { return kernels::qc8_tile_bytes(s.k); }

void qc8w_pack(const FcShape& s, size_t first, size_t count, const void* weight, const void* bias,
               const void* scales, void* packed) {
  kernels::qc8w_pack(static_cast<const int8_t*>(weight) + first * s.k,
                     static_cast<const float*>(scales) + first,
                     bias != nullptr ? static_cast<const float*>(bias) + first : nullptr, s.k,
                     count, packed);
}

void settle_qc8w() { (void)kernels::qs8_kernel_sets(); }

Status qc8w_check_slab(const FcShape& s, const FcSlab& slab) {
  return kernels::check_qs8_kernel_args(s.k, slab.count, slab.packed, slab.packed_bytes);
}

Status quantize_rows(const FcShape& s, FcRows* r) {
  return kernels::qs8_quantize_rows(kernels::qs8_kernel_sets().best(), s.k, r->rows, r->x, s.k,
                                    r->scratch);
}

bool qc8w_run_slab(const FcShape& s, const FcSlab& slab, const FcRows& r, const FcSlab*, bool) {
  return kernels::qs8_qc8w_run_quantized(kernels::qs8_kernel_sets().best(), slab.packed,
                                         slab.packed_bytes, s.k, slab.count, r.rows, r.scratch,
                                         r.y + slab.first, s.n)
      .ok();
}

// --- qb8w: int8 in blocks of 32 inputs, float16 scales per block, float bias; activations as
// qc8w's.

size_t qb8w_tile_bytes(const FcShape& s) { return kernels::qb8_tile_bytes(s.k); }

void qb8w_pack(const FcShape& s, size_t first, size_t count, const void* weight, const void* bias,
               const void* scales, void* packed) {
  kernels::qb8w_pack(static_cast<const int8_t*>(weight) + first * s.k,
                     static_cast<const uint16_t*>(scales) + first * (s.k / kernels::kActBlock),
                     bias != nullptr ? static_cast<const float*>(bias) + first : nullptr, s.k,
                     count, packed);
}

void settle_qb8w() {
  (void)kernels::qs8_kernel_sets();
  (void)kernels::qb8_kernel_sets();
}

Status qb8w_check_slab(const FcShape& s, const FcSlab& slab) {
  return kernels::check_qb8_kernel_args(s.k, slab.count, slab.packed, slab.packed_bytes);
}

bool qb8w_run_slab(const FcShape& s, const FcSlab& slab, const FcRows& r, const FcSlab*, bool) {
  return kernels::qs8_qb8w_run_quantized(kernels::qb8_kernel_sets().best(), slab.packed,
                                         slab.packed_bytes, s.k, slab.count, r.rows, r.scratch,
                                         r.y + slab.first, s.n)
      .ok();
}

// --- qb5w: signed 5-bit in blocks of 32 inputs, float16 scales per block, float bias; activations
// as qc8w's.

size_t qb5w_tile_bytes(const FcShape& s) { return kernels::qb5_tile_bytes(s.k); }

void qb5w_pack(const FcShape& s, size_t first, size_t count, const void* weight, const void* bias,
               const void* scales, void* packed) {
  const size_t blocks = s.k / kernels::kActBlock;
  const size_t row_bytes = blocks * kernels::kQB5RowBlockBytes;
  kernels::qb5w_pack(static_cast<const uint8_t*>(weight) + first * row_bytes,
                     static_cast<const uint16_t*>(scales) + first * blocks,
                     bias != nullptr ? static_cast<const float*>(bias) + first : nullptr, s.k,
                     count, packed);
}

void settle_qb5w() {
  (void)kernels::qs8_kernel_sets();
  (void)kernels::qb5_kernel_sets();
}

Status qb5w_check_slab(const FcShape& s, const FcSlab& slab) {
  return kernels::check_qb5_kernel_args(s.k, slab.count, slab.packed, slab.packed_bytes);
}

bool qb5w_run_slab(const FcShape& s, const FcSlab& slab, const FcRows& r, const FcSlab*, bool) {
  return kernels::qs8_qb5w_run_quantized(kernels::qb5_kernel_sets().best(), slab.packed,
                                         slab.packed_bytes, s.k, slab.count, r.rows, r.scratch,
                                         r.y + slab.first, s.n)
      .ok();
}

// --- qc4w: int4 in groups along the input dim, float16 scales, float bias; activations as qc8w's.

size_t qc4w_tile_bytes(const FcShape& s) { return kernels::qc4_tile_bytes(s.k, s.group); }

void qc4w_pack(const FcShape& s, size_t first, size_t count, const void* weight, const void* bias,
               const void* scales, void* packed) {
  kernels::qc4w_pack(static_cast<const uint8_t*>(weight) + first * (s.k / 2),
                     static_cast<const uint16_t*>(scales) + first * (s.k / s.group),
                     bias != nullptr ? static_cast<const float*>(bias) + first : nullptr, s.k,
                     count, s.group, packed);
}

void settle_qc4w() {
  (void)kernels::qs8_kernel_sets();
  (void)kernels::qc4_kernel_sets();
}

Status qc4w_check_slab(const FcShape& s, const FcSlab& slab) {
  return kernels::check_qc4_kernel_args(s.k, slab.count, s.group, slab.packed, slab.packed_bytes);
}

bool qc4w_run_slab(const FcShape& s, const FcSlab& slab, const FcRows& r, const FcSlab*, bool) {
  return kernels::qs8_qc4w_run_quantized(kernels::qc4_kernel_sets().best(), slab.packed,
                                         slab.packed_bytes, s.k, slab.count, s.group, r.rows,
                                         r.scratch, r.y + slab.first, s.n)
      .ok();
}

void f32_unpacked(size_t m, size_t n, size_t k, const float* x, const void* w, const float*,
                  float* y) {
  runtime::portable::gemm_nt_kernels().f32(m, n, k, x, static_cast<const float*>(w), y);
}

void f16w_unpacked(size_t m, size_t n, size_t k, const float* x, const void* w, const float*,
                   float* y) {
  runtime::portable::gemm_nt_kernels().f16(m, n, k, x, static_cast<const uint16_t*>(w), y);
}

void qc8w_unpacked(size_t m, size_t n, size_t k, const float* x, const void* w,
                   const float* scales, float* y) {
  runtime::portable::gemm_nt_kernels().q8(m, n, k, x, static_cast<const int8_t*>(w), scales, y);
}

// The rows. The vector kernels read a tile in 64-byte groups, so every own packing starts on a
// cache line.
constexpr FcFormat kF32 = {
    "f32",     1,       "f32",   ScalarType::Float, kSchemeNone, 32,      ScalarType::Float,
    false,     false,   ScalarType::Float, 0, nullptr,
    0,         0,       4,       nullptr,           nullptr,     &settle_f32,
    nullptr,   &no_scratch,      nullptr,           nullptr,     &f32_unpacked,
};
constexpr FcFormat kF16W = {
    "f16w",           2,           "f16",           ScalarType::Half, kSchemeNone, 16,
    ScalarType::Half, false,       false,           ScalarType::Half, 0, nullptr,
    kernels::kF16WTile, 64,        2,               &f16w_tile_bytes, &f16w_pack,  &settle_f16w,
    &f16w_check_slab, &no_scratch, nullptr,         &f16w_run_slab,  &f16w_unpacked,
};
constexpr FcFormat kQC8W = {
    "qc8w",            3,             "int8",         ScalarType::Char, kSchemeQC8W, 8,
    ScalarType::Float, true,          false,          ScalarType::Float, 0, nullptr,
    kernels::kQC8Tile, 64,            1,              &qc8w_tile_bytes, &qc8w_pack,  &settle_qc8w,
    &qc8w_check_slab,  &quantized_layout, &quantize_rows, &qc8w_run_slab, &qc8w_unpacked,
};
// Blocks of 32 only: the kernels fuse one weight scale per activation block.
constexpr FcFormat kQB8W = {
    "qb8w",            5,             "int8 per block", ScalarType::Char, kSchemeQB8W, 8,
    ScalarType::Float, true,          true,             ScalarType::Half, 0x1, "32",
    kernels::kQC8Tile, 64,            1,                &qb8w_tile_bytes, &qb8w_pack, &settle_qb8w,
    &qb8w_check_slab,  &quantized_layout, &quantize_rows, &qb8w_run_slab, nullptr,
};
constexpr FcFormat kQC4W = {
    "qc4w",            4,             "int4",        ScalarType::Byte, kSchemeQC4W, 4,
    ScalarType::Float, true,          true,          ScalarType::Half, 0x7, "32, 64 or 128",
    kernels::kQC4Tile, 64,            1,             &qc4w_tile_bytes, &qc4w_pack,  &settle_qc4w,
    &qc4w_check_slab,  &quantized_layout, &quantize_rows, &qc4w_run_slab, nullptr,
};

// Blocks of 32 only, as qb8w.
constexpr FcFormat kQB5W = {
    "qb5w",            6,             "int5 per block", ScalarType::Byte, kSchemeQB5W, 5,
    ScalarType::Float, true,          true,             ScalarType::Half, 0x1, "32",
    kernels::kQC8Tile, 64,            1,                &qb5w_tile_bytes, &qb5w_pack, &settle_qb5w,
    &qb5w_check_slab,  &quantized_layout, &quantize_rows, &qb5w_run_slab, nullptr,
};

// qc8w before qb8w: fc_format(Char) is the row a weight read as stored runs as (qc4w before qb5w
// likewise for Byte, though no unpacked path takes either).
constexpr const FcFormat* kFormats[] = {&kF32, &kF16W, &kQC8W, &kQB8W, &kQC4W, &kQB5W};

}  // namespace

kernels::QS8Scratch QuantizedScratchLayout::scratch(void* block) const {
  uint8_t* base = static_cast<uint8_t*>(block);
  kernels::QS8Scratch scratch;
  if (block == nullptr || bytes == 0) return scratch;
  scratch.q = reinterpret_cast<int8_t*>(base);
  scratch.scales = reinterpret_cast<float*>(base + scales);
  scratch.sums = reinterpret_cast<int32_t*>(base + sums);
  scratch.max_rows = max_rows;
  return scratch;
}

const FcFormat* fc_format(ScalarType dtype, int8_t quant_scheme) {
  for (const FcFormat* format : kFormats) {
    if (format->weight_dtype == dtype && format->quant_scheme == quant_scheme) return format;
  }
  return nullptr;
}

const FcFormat* fc_format(ScalarType dtype) {
  for (const FcFormat* format : kFormats) {
    if (format->weight_dtype == dtype) return format;
  }
  return nullptr;
}

const FcFormat* const* fc_formats(size_t* count) {
  *count = sizeof(kFormats) / sizeof(kFormats[0]);
  return kFormats;
}

}  // namespace xnnpack
}  // namespace edgeshare
