// FcFormat: one row per fully connected weight format (f32, f16w, qc8w, qb8w, qc4w, qb5w), the one
// place the delegate says what a format is. Everything that differs between formats is a field or
// a function of its row, so the graph reader, the compiler, the weights cache and PackedOperator
// ask the row and never branch on a dtype themselves; adding a format is adding a row
// (docs/adding_a_format.md).
//
//   const FcFormat* format = fc_format(dtype, quant_scheme);   // null: no such format
//   ES_RETURN_IF_ERROR(format->check(request));                // the constants a node names
//   QuantizedScratchLayout scratch = format->scratch(max_rows, shape);
//
// A row carries: its name and scheme id (the Python rows in exir/fc_formats.py carry the same;
// backends/xnnpack/fc_format_rows_test.py checks both sides agree), the weight's dtype and file
// scheme, how the stored entry's shape relates to [out, in] (int4: two values a byte), the bias
// and scales it needs, its packing (tile, bytes per tile, alignment, pack; none for f32, which
// XNNPACK packs), the scratch a run needs, and the run itself: `prepare` once per run over the
// rows (quantize, sum groups), then `run_slab` per column slab (PackedOperator spreads slabs over
// threads), or `run_unpacked` over a weight as stored (docs/adding_a_format.md walks one row).
//
// Errors: check returns InvalidArgument naming the weight and what it needs; check_slab
// InvalidArgument naming the broken kernel precondition.
// Thread-safety: rows are constants; run_slab may run on several threads at once for different
// slabs of one run. Ownership: rows are static; nothing they are given is kept.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_FC_FORMAT_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_FC_FORMAT_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/scalar_type.h"

namespace edgeshare {
namespace xnnpack {

// Where the scratch of one fully connected node lies in a block of bytes the caller owns (a slot
// of its graph's arena, live only while the node runs, so nodes that never run at once share the
// bytes): the quantized rows, their blocks' scales and their blocks' sums (rows x act_blocks(k)
// each). Each part starts on a cache line.
// Nothing in it is read before a run writes it, so a block planned for a long bound costs memory
// only for the rows runs use. A format that needs no scratch has bytes == 0.
struct QuantizedScratchLayout {
  size_t max_rows = 0;
  size_t scales = 0, sums = 0;  // Byte offsets; the quantized rows start at 0.
  size_t bytes = 0;             // The whole block.

  // The parts in `block` (at least `bytes` long, 64-byte aligned).
  kernels::QS8Scratch scratch(void* block) const;
};

// A weight's sizes: k inputs, n outputs, and the inputs per scale (qc4w; 0 otherwise).
struct FcShape {
  size_t k = 0, n = 0, group = 0;
};

// Output channels [first, first + count) of a packed weight: its tiles at `packed`.
struct FcSlab {
  const void* packed = nullptr;
  size_t packed_bytes = 0;
  size_t first = 0, count = 0;
};

// One run's rows, and what `prepare` made of them for every slab.
struct FcRows {
  size_t rows = 0;
  const float* x = nullptr;  // rows x k, k floats apart.
  float* y = nullptr;        // rows x n, n floats apart.
  kernels::QS8Scratch scratch;
};

struct FcFormat {
  const char* name;    // "f32", "f16w", "qc8w", "qb8w", "qc4w", "qb5w": also the Python row's.
  uint8_t scheme;      // The weights cache's op kind for its entries; also the Python row's.
  const char* what;    // For messages: "f32", "f16", "int8", "int4".
  runtime::ScalarType weight_dtype;
  int8_t quant_scheme;      // xnnpack_graph.fbs QuantScheme of its weight values.
  // Bits a value takes in the stored entry, which is [out, in * value_bits / (8 * element_bytes)]
  // elements: the element's bits, or fewer where values share bytes (int4: 4; int5: 5).
  size_t value_bits;
  runtime::ScalarType bias_dtype;
  bool has_scales;          // Scales under the value's scales_key:
  bool group_scales;        // [out, in / group] (group_size in the graph), else [out];
  runtime::ScalarType scales_dtype;
  uint8_t group_bits;       // The group sizes it takes: bit i for 32 << i (0: no groups).
  const char* group_sizes;  // The same, for messages ("32, 64 or 128").

  // Its own packing, or none (tile == 0: XNNPACK packs and runs f32 weights).
  size_t tile;  // Output channels per tile; slabs start on whole tiles.
  size_t alignment;
  size_t element_bytes;  // Of the stored weight, for slab sizing.
  size_t (*tile_bytes)(const FcShape& shape);
  // Packs output channels [first, first + count) of the whole weight, bias (null: none) and scales
  // into `packed` (count / tile tiles, rounded up).
  void (*pack)(const FcShape& shape, size_t first, size_t count, const void* weight,
               const void* bias, const void* scales, void* packed);
  // Settles the process's kernels for this format (their probes) before anything is packed.
  void (*settle)();
  // The kernels' preconditions for one packed slab, checked once when the entry is sealed.
  runtime::Status (*check_slab)(const FcShape& shape, const FcSlab& slab);

  // The scratch a run of up to max_rows rows needs (bytes == 0: none).
  QuantizedScratchLayout (*scratch)(size_t max_rows, const FcShape& shape);
  // Once per run, before any slab: null, or quantizes the rows into rows->scratch.
  runtime::Status (*prepare)(const FcShape& shape, FcRows* rows);
  // One slab over every row (`next`: the slab this thread runs after it, to prefetch; `first`:
  // the first slab this thread runs). False when a kernel refused its arguments.
  bool (*run_slab)(const FcShape& shape, const FcSlab& slab, const FcRows& rows,
                   const FcSlab* next, bool first);
  // y[m, n] = x[m, k] . w^T over a weight as stored ([n, k] row-major in weight_dtype; `scales`:
  // its scales, formats with scales), never packed: a swappable adapter's rebindable bytes. Null:
  // the format does not run unpacked.
  void (*run_unpacked)(size_t m, size_t n, size_t k, const float* x, const void* w,
                       const float* scales, float* y);

  bool own_packing() const { return tile != 0; }
  bool takes_group(size_t group) const {
    for (size_t i = 0; i < 8; ++i) {
      if ((group_bits >> i & 1u) != 0 && group == size_t{32} << i) return true;
    }
    return false;
  }
  // The stored weight entry's dims for an [out, in] weight, and a request's group size.
  size_t stored_in(size_t input_channels) const {
    return input_channels * value_bits / (8 * element_bytes);
  }
  // Whether several values share a stored byte (the entry is named uint8 bytes).
  bool packs_values() const { return value_bits < 8 * element_bytes; }
};

// The row for a weight value of `dtype` with `quant_scheme`, or null when no format has them.
const FcFormat* fc_format(runtime::ScalarType dtype, int8_t quant_scheme);
// The first row whose weight dtype is `dtype`, or null: the only one but for int8, where it is
// qc8w, the row a weight read as stored (with its scales as an input) runs as.
const FcFormat* fc_format(runtime::ScalarType dtype);

// Every row, for tests and tools; *count of them.
const FcFormat* const* fc_formats(size_t* count);

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_FC_FORMAT_H_
