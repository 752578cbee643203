#include "edgeshare/backends/xnnpack/runtime/fc_format.h"
#include "edgeshare/backends/xnnpack/runtime/graph_compiler.h"

#include <xnnpack.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <variant>

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::ScalarType;
using runtime::Status;

namespace fb = ::edgeshare::xnnpack::schema;

namespace {

// Arena slots start on 64-byte boundaries; XNNPACK may read XNN_EXTRA_BYTES past an input's end.
constexpr size_t kSlotAlignFloats = 16;
constexpr size_t kPadFloats = (XNN_EXTRA_BYTES + sizeof(float) - 1) / sizeof(float);

}  // namespace

Status GraphCompiler::compile(GraphValues values) {
  out_->values = std::move(values.values);
  out_->inputs = std::move(values.inputs);
  out_->outputs = std::move(values.outputs);
  defined_ = std::move(values.defined);
  out_->symbols = std::move(values.symbols);
  out_->symbol_sizes.assign(out_->symbols.size(), 0);
  out_->pointers.assign(out_->values.size(), nullptr);
  slot_offset_.assign(out_->values.size(), SIZE_MAX);
  slot_floats_.assign(out_->values.size(), 0);
  first_use_.assign(out_->values.size(), 0);
  last_use_.assign(out_->values.size(), 0);
  place_inline_constants();
  mark_read_directly();
  mark_last_reads();
  find_rms_norms();
  Status compiled;
  for (uint32_t n = 0; n < graph_.nodes()->size() && compiled.ok(); ++n) {
    current_node_ = n;
    compiled = compile_node(n);
  }
  // After a failed node too: what the nodes before it asked for is packed (and given back with
  // `out_`), so the counters, and which error wins when a weight fails its check first, are what
  // packing node by node gave.
  ES_RETURN_IF_ERROR(pack_requested());
  ES_RETURN_IF_ERROR(compiled);
  for (uint32_t i = 0; i < out_->outputs.size(); ++i) {
    ES_CHECK_OR_RETURN_ERROR(defined_[out_->outputs[i]], Error::InvalidProgram,
                             "no node writes delegate output %u (value %u)", i, out_->outputs[i]);
  }
  share_quantized_inputs();
  return place_arena();
}

// Copied: the blob may be freed after init, and XNNPACK wants aligned, padded floats.
void GraphCompiler::place_inline_constants() {
  const auto& fvalues = *graph_.values();
  for (uint32_t id = 0; id < fvalues.size(); ++id) {
    const fb::Value* v = fvalues.Get(id);
    if (v->kind() != fb::ValueKind_CONSTANT || v->inline_data() == nullptr) continue;
    std::vector<float> copy(out_->values[id].numel + kPadFloats, 0.0f);
    std::memcpy(copy.data(), v->inline_data()->data(), v->inline_data()->size());
    out_->pointers[id] = copy.data();
    out_->constants.push_back(std::move(copy));
  }
}

// Values read at run time by some node (everything but packed weights): such a constant is
// retained before a fully connected op packs it, and the packing then reads the retained bytes, so
// a weight used both ways (a bias added again, say) is fetched once. Out-of-range ids are skipped
// here and rejected by read_inputs().
void GraphCompiler::mark_read_directly() {
  read_directly_.assign(out_->values.size(), false);
  for (const fb::Node* node : *graph_.nodes()) {
    if (node->inputs() == nullptr) continue;
    const OpRow* row = find_op_row(static_cast<uint8_t>(node->op()));
    const bool packs = row != nullptr && row->inputs == OpInputs::kPackedWeights;
    for (uint32_t i = 0; i < node->inputs()->size(); ++i) {
      const uint32_t id = node->inputs()->Get(i);
      if (id < read_directly_.size() && (!packs || i == 0)) read_directly_[id] = true;
    }
  }
}

// Lifetimes in nodes: a value lives from the node writing it to the last node reading it, so two
// values whose nodes never overlap can share arena bytes. Out-of-range ids are skipped here and
// rejected by read_inputs().
void GraphCompiler::mark_last_reads() {
  const auto& nodes = *graph_.nodes();
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    if (nodes.Get(n)->inputs() == nullptr) continue;
    for (uint32_t id : *nodes.Get(n)->inputs()) {
      if (id < last_use_.size()) last_use_[id] = std::max(last_use_[id], n);
    }
  }
}

// The six nodes, in this order and next to each other, of x * rsqrt(mean(x^2, -1) + eps) * w as
// torch exports an RMS norm (each product's operands in either order): one step over the rows
// instead of six operators, which at a few rows of a decode step cost more in their calls and
// their passes over the intermediates than in their arithmetic. Only where nothing else reads the
// five intermediates, no node clamps, eps is an inline scalar and w a float vector as long as x's
// last dim; anything else compiles node by node.
void GraphCompiler::find_rms_norms() {
  const auto& nodes = *graph_.nodes();
  norm_role_.assign(nodes.size(), NormRole::kNone);
  norm_index_.assign(nodes.size(), 0);
  const size_t num_values = out_->values.size();
  std::vector<uint32_t> readers(num_values, 0);
  for (const fb::Node* node : nodes) {
    if (node->inputs() == nullptr) continue;
    for (uint32_t id : *node->inputs()) {
      if (id < num_values) ++readers[id];
    }
  }
  std::vector<bool> is_output(num_values, false);
  for (uint32_t id : out_->outputs) {
    if (id < num_values) is_output[id] = true;
  }
  const float inf = std::numeric_limits<float>::infinity();
  // The node's inputs when it is `op` with `count` in-range inputs, one in-range output and no
  // clamp; else null.
  auto node_of = [&](uint32_t n, fb::OpKind op, uint32_t count) -> const fb::Node* {
    const fb::Node* node = nodes.Get(n);
    if (node->op() != op || node->inputs() == nullptr || node->inputs()->size() != count ||
        node->outputs() == nullptr || node->outputs()->size() != 1 ||
        node->outputs()->Get(0) >= num_values || node->output_min() != -inf ||
        node->output_max() != inf) {
      return nullptr;
    }
    for (uint32_t id : *node->inputs()) {
      if (id >= num_values) return nullptr;
    }
    return node;
  };
  auto out_of = [](const fb::Node* node) { return node->outputs()->Get(0); };
  // The operand of a two-input node other than `known`, or num_values when neither is `known`.
  auto other = [&](const fb::Node* node, uint32_t known) -> uint32_t {
    const uint32_t a = node->inputs()->Get(0), b = node->inputs()->Get(1);
    return a == known ? b : b == known ? a : static_cast<uint32_t>(num_values);
  };
  auto private_intermediate = [&](uint32_t id) {
    return readers[id] == 1 && !is_output[id] && value(id).kind == fb::ValueKind_INTERMEDIATE;
  };
  for (uint32_t n = 0; n + 6 <= nodes.size(); ++n) {
    const fb::Node* square = node_of(n, fb::OpKind_SQUARE, 1);
    const fb::Node* mean = node_of(n + 1, fb::OpKind_MEAN_LAST_DIM, 1);
    const fb::Node* add = node_of(n + 2, fb::OpKind_ADD, 2);
    const fb::Node* rsqrt = node_of(n + 3, fb::OpKind_RSQRT, 1);
    const fb::Node* scale = node_of(n + 4, fb::OpKind_MULTIPLY, 2);
    const fb::Node* times_w = node_of(n + 5, fb::OpKind_MULTIPLY, 2);
    if (!square || !mean || !add || !rsqrt || !scale || !times_w) continue;
    const uint32_t x = square->inputs()->Get(0);
    if (mean->inputs()->Get(0) != out_of(square)) continue;
    const uint32_t eps = other(add, out_of(mean));
    if (eps == num_values || rsqrt->inputs()->Get(0) != out_of(add)) continue;
    if (other(scale, x) != out_of(rsqrt)) continue;
    const uint32_t w = other(times_w, out_of(scale));
    if (w == num_values) continue;
    const ValueInfo& xv = value(x);
    const ValueInfo& ev = value(eps);
    const ValueInfo& wv = value(w);
    const bool shapes = xv.dtype == ScalarType::Float && !xv.dims.empty() && xv.shape.back() > 0 &&
                        wv.dtype == ScalarType::Float && wv.dims.size() == 1 &&
                        wv.dims[0] == xv.dims.back() && ev.kind == fb::ValueKind_CONSTANT &&
                        ev.dtype == ScalarType::Float && ev.numel == 1 &&
                        out_->pointers[eps] != nullptr;
    bool private_steps = true;
    for (const fb::Node* node : {square, mean, add, rsqrt, scale}) {
      private_steps = private_steps && private_intermediate(out_of(node));
    }
    if (!shapes || !private_steps || w == x) continue;
    FusedNorm norm;
    norm.in = x;
    norm.weight = w;
    norm.epsilon = *static_cast<const float*>(out_->pointers[eps]);
    for (uint32_t k = n; k < n + 6; ++k) {
      norm_role_[k] = k + 1 < n + 6 ? NormRole::kInside : NormRole::kLast;
      norm_index_[k] = norms_.size();
    }
    norms_.push_back(norm);
    n += 5;
  }
}

Status GraphCompiler::build_rms_norm(const NodeContext& c) {
  const FusedNorm& norm = norms_[norm_index_[c.node]];
  ES_RETURN_IF_ERROR(ensure_pointer(norm.in));
  ES_RETURN_IF_ERROR(ensure_pointer(norm.weight));
  RmsNormStep step;
  step.channels = static_cast<size_t>(value(norm.in).dims.back());
  step.rows = value(norm.in).numel / step.channels;
  step.epsilon = norm.epsilon;
  step.in = norm.in;
  step.weight = norm.weight;
  step.out = c.out;
  // The step reads its input at the last node, past the input's last reader in the graph.
  last_use_[norm.in] = std::max(last_use_[norm.in], c.node);
  add_step(c.node, std::move(step));
  return Status();
}

Status GraphCompiler::compile_node(uint32_t n) {
  const fb::Node& node = *graph_.nodes()->Get(n);
  const uint8_t raw_op = static_cast<uint8_t>(node.op());
  const OpRow* row = find_op_row(raw_op);
  ES_CHECK_OR_RETURN_ERROR(row != nullptr, Error::NotSupported, "node %u has unknown op kind %u", n,
                           raw_op);
  NodeContext c;
  c.compiler = this;
  c.row = row;
  c.node = n;
  c.name = row->name;
  ES_RETURN_IF_ERROR(read_inputs(node, &c));
  ES_RETURN_IF_ERROR(claim_output(node, &c));
  ES_RETURN_IF_ERROR(read_attributes(node, &c));
  c.x = value(c.in[0]);
  c.y = value(c.out);
  ES_RETURN_IF_ERROR(row->check_shapes(c));
  if (norm_role_[n] == NormRole::kInside) {
    slot_floats_[c.out] = 0;  // Never written: the fused step does not materialise it.
    return Status();
  }
  if (norm_role_[n] == NormRole::kLast) return build_rms_norm(c);
  ES_RETURN_IF_ERROR(row->build(c));
  const float inf = std::numeric_limits<float>::infinity();
  const bool clamped = c.output_min != -inf || c.output_max != inf;
  return clamped && !c.clamp_folded ? add_output_clamp(c) : Status();
}

Status GraphCompiler::read_inputs(const fb::Node& node, NodeContext* c) const {
  const size_t num_in = node.inputs() ? node.inputs()->size() : 0;
  const size_t num_out = node.outputs() ? node.outputs()->size() : 0;
  ES_CHECK_OR_RETURN_ERROR(
      num_in >= c->row->min_inputs && num_in <= c->row->max_inputs && num_out == 1,
      Error::InvalidProgram, "node %u (%s) has %zu inputs and %zu outputs", c->node, c->name,
      num_in, num_out);
  const uint32_t num_values = graph_.values()->size();
  c->num_in = num_in;
  for (size_t i = 0; i < num_in; ++i) {
    const uint32_t id = node.inputs()->Get(i);
    c->in[i] = id;
    ES_CHECK_OR_RETURN_ERROR(id < num_values, Error::InvalidProgram,
                             "node %u (%s): input %zu is value %u, past the %u values", c->node,
                             c->name, i, id, num_values);
    ES_CHECK_OR_RETURN_ERROR(defined_[id], Error::InvalidProgram,
                             "node %u (%s): input value %u is read before any node writes it",
                             c->node, c->name, id);
    ES_CHECK_OR_RETURN_ERROR(
        value(id).dtype == ScalarType::Float ||
            (c->row->inputs == OpInputs::kPackedWeights && i > 0) ||
            (c->row->inputs == OpInputs::kReadWeight && i == 1),
        Error::NotSupported,
        "node %u (%s): input %zu (value %u) is not float32; only a fully connected node's "
        "weight and bias may be",
        c->node, c->name, i, id);
  }
  return Status();
}

Status GraphCompiler::claim_output(const fb::Node& node, NodeContext* c) {
  const uint32_t num_values = graph_.values()->size();
  const uint32_t out = node.outputs()->Get(0);
  ES_CHECK_OR_RETURN_ERROR(out < num_values, Error::InvalidProgram,
                           "node %u (%s): output is value %u, past the %u values", c->node, c->name,
                           out, num_values);
  const uint8_t kind = value(out).kind;
  ES_CHECK_OR_RETURN_ERROR(
      (kind == fb::ValueKind_INTERMEDIATE || kind == fb::ValueKind_OUTPUT) && !defined_[out],
      Error::InvalidProgram,
      "node %u (%s): output value %u is an input, a constant, or written twice", c->node, c->name,
      out);
  for (size_t i = 0; i < c->num_in; ++i) {
    ES_CHECK_OR_RETURN_ERROR(c->in[i] != out, Error::InvalidProgram,
                             "node %u (%s) writes its own input value %u", c->node, c->name, out);
  }
  defined_[out] = true;
  if (kind == fb::ValueKind_INTERMEDIATE) add_slot(out, value(out).numel);
  c->out = out;
  return Status();
}

Status GraphCompiler::read_attributes(const fb::Node& node, NodeContext* c) const {
  c->output_min = node.output_min();
  c->output_max = node.output_max();
  c->alpha = node.alpha();
  ES_CHECK_OR_RETURN_ERROR(
      !std::isnan(c->output_min) && !std::isnan(c->output_max) && c->output_min <= c->output_max,
      Error::InvalidProgram, "node %u (%s) has output range [%g, %g]", c->node, c->name,
      c->output_min, c->output_max);
  return Status();
}

// The op cannot clamp itself (or is shared, where a clamp would split the cache entry): its output
// is clamped in place.
Status GraphCompiler::add_output_clamp(const NodeContext& c) {
  const size_t n = elementwise_channels(c.y);
  xnn_operator_t op = nullptr;
  const xnn_status status =
      xnn_create_clamp_nc_f32(n, n, n, c.output_min, c.output_max, /*flags=*/0, &op);
  UnaryStep clamp;
  clamp.op.reset(op);
  ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateInitFailed,
                           "node %u (%s): XNNPACK could not create the output clamp (status %d)",
                           c.node, c.name, static_cast<int>(status));
  clamp.setup = xnn_setup_clamp_nc_f32;
  clamp.channels = n;
  clamp.batch = c.y.numel / n;
  clamp.in = clamp.out = c.out;
  add_step(c.node, std::move(clamp));
  return Status();
}

// Greedy by size, largest first: each slot goes at the lowest aligned offset that overlaps no
// placed slot whose lifetime meets its own (inclusive, so a node's inputs, scratch and output never
// share bytes).
Status GraphCompiler::place_arena() {
  std::vector<uint32_t> ids;
  for (uint32_t id = 0; id < slot_floats_.size(); ++id) {
    if (slot_floats_[id] > 0) ids.push_back(id);
  }
  // std::sort with the id as tie-break (deterministic); stable_sort's temporary buffer comes from
  // nothrow operator new, which allocation-counting tests do not replace.
  std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
    return slot_floats_[a] != slot_floats_[b] ? slot_floats_[a] > slot_floats_[b] : a < b;
  });
  std::vector<uint32_t> placed;
  for (uint32_t id : ids) {
    size_t offset = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (uint32_t other : placed) {
        const bool live_together =
            first_use_[id] <= last_use_[other] && first_use_[other] <= last_use_[id];
        const bool overlap = offset < slot_offset_[other] + slot_floats_[other] &&
                             slot_offset_[other] < offset + slot_floats_[id];
        if (live_together && overlap) {
          offset = slot_offset_[other] + slot_floats_[other];
          moved = true;
        }
      }
    }
    slot_offset_[id] = offset;
    arena_floats_ = std::max(arena_floats_, offset + slot_floats_[id]);
    placed.push_back(id);
  }
  ES_CHECK_OR_RETURN_ERROR(arena_floats_ <= kMaxNumel, Error::InvalidProgram,
                           "XNNPACK graph needs %zu bytes of intermediates, more than %llu",
                           arena_floats_ * sizeof(float),
                           static_cast<unsigned long long>(kMaxNumel * sizeof(float)));
  // One arena for every intermediate, the last allocation. Zeroed (nothing uninitialised is ever
  // read) and resident only where runs write it.
  out_->arena_floats = arena_floats_;
  runtime::Result<runtime::ZeroedMemory> arena =
      runtime::ZeroedMemory::allocate(arena_floats_ * sizeof(float));
  ES_CHECK_OR_RETURN_ERROR(arena.ok(), Error::MemoryAllocationFailed,
                           "XNNPACK graph: cannot allocate %zu bytes of intermediates",
                           arena_floats_ * sizeof(float));
  out_->arena = std::move(*arena);
  out_->arena_base = static_cast<float*>(out_->arena.data());
  for (uint32_t id = 0; id < slot_offset_.size(); ++id) {
    if (slot_offset_[id] == SIZE_MAX) continue;
    out_->arena_slots.emplace_back(id, slot_offset_[id]);
    out_->pointers[id] = out_->arena_base + slot_offset_[id];
  }
  return Status();
}

ConstantRef GraphCompiler::constant_ref(uint32_t id) const {
  const fb::Value* v = graph_.values()->Get(id);
  ConstantRef ref;
  ref.identity.dtype = value(id).dtype;
  ref.identity.dims.assign(value(id).dims.begin(), value(id).dims.end());
  // A weight's entry is [out, stored_in(in)] (int4: two values a byte).
  const FcFormat* format = value(id).format;
  if (format != nullptr && ref.identity.dims.size() == 2) {
    ref.identity.dims[1] = static_cast<uint32_t>(format->stored_in(ref.identity.dims[1]));
  }
  if (v->inline_data() != nullptr) {
    ref.identity.is_inline = true;
    ref.identity.inline_bytes.assign(v->inline_data()->begin(), v->inline_data()->end());
  } else {
    ref.key = v->key()->str();
    std::memcpy(ref.identity.digest.bytes.data(), v->digest()->data(), 32);
  }
  return ref;
}

ConstantRef GraphCompiler::scales_ref(uint32_t id) const {
  const fb::Value* v = graph_.values()->Get(id);
  ConstantRef ref;
  // [out], or [out, in / group] (graph_reader checked the group divides in).
  const FcFormat& format = *value(id).format;
  ref.identity.dtype = format.scales_dtype;
  ref.identity.dims.assign(1, static_cast<uint32_t>(value(id).dims[0]));
  if (format.group_scales) {
    ref.identity.dims.push_back(static_cast<uint32_t>(value(id).dims[1]) / v->group_size());
  }
  ref.key = v->scales_key()->str();  // graph_reader checked a value with scales has both.
  std::memcpy(ref.identity.digest.bytes.data(), v->scales_digest()->data(), 32);
  return ref;
}

Status GraphCompiler::ensure_pointer(uint32_t id) {
  if (out_->pointers[id] != nullptr || value(id).kind != fb::ValueKind_CONSTANT) return Status();
  ES_ASSIGN_OR_RETURN(RetainedConstant * constant, cache_->retain_constant(map_, constant_ref(id)));
  out_->retained.emplace_back(constant, CacheRelease<RetainedConstant>{cache_});
  out_->pointers[id] = const_cast<float*>(constant->data());
  return Status();
}

void GraphCompiler::request_packed(uint32_t node, FullyConnectedRequest request) {
  requests_.push_back(std::move(request));
  request_nodes_.push_back(node);
}

// One batch for the whole graph: asked node by node, each miss was one pool call in which one
// thread hashed the weight while the other packed its slabs and then waited for the hash, so two
// threads gained little over one and lost badly when the cores were shared (pool calls waiting
// on a descheduled thread). Measured with lora_runner on the reference model's first load, 25
// interleaved pairs on a machine at load average 6-8 (other jobs on both cores): 2 threads,
// verified, median 606 ms batched vs 1100 ms node by node (unverified 376 vs 980 ms); 1 thread
// 524 vs 529 ms (unverified 256 vs 253 ms). In moments when the machine was mostly idle (>= 80%
// idle for 0.5 s before each pair; 3 pairs): verified 2 threads / 1 thread 0.53x batched (82.7 /
// 156.3 ms) vs 0.64x node by node (101.0 / 157.5 ms); unverified 0.60x vs 0.77x.
Status GraphCompiler::pack_requested() {
  if (requests_.empty()) return Status();
  std::vector<PackedOperator*> entries;
  size_t failed = 0;
  const Status status = cache_->get_or_pack_fully_connected(map_, requests_, &entries, &failed);
  if (!status.ok()) {
    return status.WithContext("node %u (FULLY_CONNECTED)", request_nodes_[failed]);
  }
  size_t next = 0;
  for (Step& step : out_->steps) {
    PackedRef* packed = nullptr;
    if (auto* fc = std::get_if<FullyConnectedStep>(&step.op)) packed = &fc->packed;
    if (packed != nullptr && next < entries.size()) {
      *packed = PackedRef(entries[next++], CacheRelease<PackedOperator>{cache_});
    }
  }
  // The request of a node that failed after asking has no step: its reference goes back.
  for (; next < entries.size(); ++next) cache_->release(entries[next]);
  return Status();
}

// Values are written once, so an input is the same rows at every step that reads it; the same
// quantizer (format.prepare) over the same input channels and the same scratch layout writes the
// same bytes. Quantizing the rows once per input instead of once per weight took a third of the
// quantizations of a transformer layer's projections off the calling thread.
void GraphCompiler::share_quantized_inputs() {
  std::vector<Step>& steps = out_->steps;
  for (size_t i = 0; i < steps.size(); ++i) {
    auto* later = std::get_if<FullyConnectedStep>(&steps[i].op);
    if (later == nullptr || later->packed == nullptr || later->scratch_layout.bytes == 0) continue;
    for (size_t j = i; j-- > 0;) {
      const auto* first = std::get_if<FullyConnectedStep>(&steps[j].op);
      if (first == nullptr || first->packed == nullptr || first->in != later->in) continue;
      const QuantizedScratchLayout& a = first->scratch_layout;
      const QuantizedScratchLayout& b = later->scratch_layout;
      const bool alike = first->packed->format().prepare == later->packed->format().prepare &&
                         first->in_channels == later->in_channels && first->batch == later->batch &&
                         a.bytes == b.bytes && a.max_rows == b.max_rows && a.scales == b.scales &&
                         a.sums == b.sums;
      if (alike) {
        slot_floats_[later->scratch] = 0;  // Its own slot is never placed.
        later->scratch = first->scratch;
        later->input_quantized = true;
        last_use_[first->scratch] = std::max(last_use_[first->scratch], steps[i].node);
        ++out_->shared_quantized_inputs;
      }
      break;
    }
  }
}

uint32_t GraphCompiler::add_value(const ValueInfo& info) {
  const uint32_t id = static_cast<uint32_t>(out_->values.size());
  out_->values.push_back(info);
  out_->pointers.push_back(nullptr);
  slot_offset_.push_back(SIZE_MAX);
  slot_floats_.push_back(0);
  first_use_.push_back(current_node_);
  last_use_.push_back(current_node_);
  return id;
}

void GraphCompiler::add_slot(uint32_t id, size_t floats) {
  slot_floats_[id] =
      (floats + kPadFloats + kSlotAlignFloats - 1) / kSlotAlignFloats * kSlotAlignFloats;
  slot_offset_[id] = 0;  // placed in place_arena
  first_use_[id] = current_node_;
  last_use_[id] = std::max(last_use_[id], current_node_);
}

uint32_t GraphCompiler::new_scratch(const ValueInfo& like) {
  ValueInfo scratch = like;
  scratch.kind = fb::ValueKind_INTERMEDIATE;
  scratch.dtype = ScalarType::Float;
  const uint32_t id = add_value(scratch);
  add_slot(id, scratch.numel);
  return id;
}

uint32_t GraphCompiler::new_scratch_bytes(size_t bytes) {
  ValueInfo scratch;
  scratch.kind = fb::ValueKind_INTERMEDIATE;
  scratch.numel = (bytes + sizeof(float) - 1) / sizeof(float);
  const uint32_t id = add_value(scratch);
  add_slot(id, scratch.numel);
  return id;
}

uint32_t GraphCompiler::new_constant(float v) {
  ValueInfo constant;
  constant.kind = fb::ValueKind_CONSTANT;
  constant.dims = {1};
  constant.shape = {1};
  const uint32_t id = add_value(constant);
  std::vector<float> data(1 + kPadFloats, 0.0f);
  data[0] = v;
  out_->pointers[id] = data.data();
  out_->constants.push_back(std::move(data));
  return id;
}

size_t GraphCompiler::elementwise_channels(const ValueInfo& v) {
  if (!v.dynamic) return v.numel;
  size_t channels = 1;
  for (size_t d = v.shape.size(); d-- > 0 && v.shape[d] >= 0;) channels *= v.dims[d];
  return channels;
}

}  // namespace xnnpack
}  // namespace edgeshare
