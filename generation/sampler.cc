#include "edgeshare/generation/sampler.h"

#include <algorithm>
#include <cmath>

#include "edgeshare/runtime/kernels/portable/argmax.h"

namespace edgeshare {
namespace generation {

using runtime::Error;
using runtime::Result;
using runtime::Span;
using runtime::Status;

Result<Sampler> Sampler::create(const SamplingOptions& options, size_t vocab_size) {
  ES_CHECK_OR_RETURN_ERROR(vocab_size > 0 && vocab_size <= INT32_MAX, Error::InvalidArgument,
                           "sampling needs a vocabulary of 1 to 2^31-1 tokens, not %zu",
                           vocab_size);
  ES_CHECK_OR_RETURN_ERROR(std::isfinite(options.temperature) && options.temperature >= 0.0f,
                           Error::InvalidArgument, "temperature %g is not a number >= 0",
                           static_cast<double>(options.temperature));
  ES_CHECK_OR_RETURN_ERROR(options.top_p > 0.0f && options.top_p <= 1.0f, Error::InvalidArgument,
                           "top_p %g is outside (0, 1]", static_cast<double>(options.top_p));
  ES_CHECK_OR_RETURN_ERROR(
      std::isfinite(options.repetition_penalty) && options.repetition_penalty > 0.0f,
      Error::InvalidArgument, "repetition penalty %g is not a number > 0",
      static_cast<double>(options.repetition_penalty));
  return Sampler(options, vocab_size);
}

Sampler::Sampler(const SamplingOptions& options, size_t vocab_size)
    : options_(options),
      vocab_size_(vocab_size),
      rng_(options.seed),
      seen_(vocab_size, 0),
      scores_(vocab_size),
      order_(vocab_size),
      probs_(vocab_size) {
  seen_ids_.reserve(vocab_size);
}

void Sampler::reset(Span<const int64_t> prompt) {
  rng_.seed(options_.seed);
  for (int64_t id : seen_ids_) seen_[static_cast<size_t>(id)] = 0;
  seen_ids_.clear();
  for (int64_t id : prompt) accept(id);
}

void Sampler::accept(int64_t token) {
  if (token < 0 || static_cast<uint64_t>(token) >= vocab_size_) return;
  if (seen_[static_cast<size_t>(token)]) return;
  seen_[static_cast<size_t>(token)] = 1;
  seen_ids_.push_back(token);  // Never past its reserved vocab_size: each id once.
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int64_t Sampler::sample(const float* logits) {
  const float* scores = logits;
  if (options_.repetition_penalty != 1.0f && !seen_ids_.empty()) {
    std::copy(logits, logits + vocab_size_, scores_.begin());
    for (int64_t id : seen_ids_) {
      float& s = scores_[static_cast<size_t>(id)];
      s = s > 0.0f ? s / options_.repetition_penalty : s * options_.repetition_penalty;
    }
    scores = scores_.data();
  }
  if (greedy()) {
    return static_cast<int64_t>(runtime::portable::argmax_kernels().f32(vocab_size_, scores));
  }
  // Candidates: all tokens, or the top_k largest (ties by lower id), most probable first.
  size_t n = vocab_size_;
  for (size_t v = 0; v < n; ++v) order_[v] = static_cast<int32_t>(v);
  const auto higher = [scores](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  size_t sorted = 0;  // order_[0, sorted) is in decreasing order
  if (options_.top_k > 0 && options_.top_k < n) {
    std::partial_sort(order_.begin(), order_.begin() + options_.top_k, order_.end(), higher);
    n = sorted = options_.top_k;
  }
  // Softmax weights of scores / temperature over the candidates (the maximum subtracted first),
  // by token id.
  float max_score = scores[order_[0]];
  if (sorted == 0) {
    for (size_t i = 1; i < n; ++i) max_score = std::max(max_score, scores[order_[i]]);
  }
  const double inv_t = 1.0 / static_cast<double>(options_.temperature);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = order_[i];
    const double p = std::exp((static_cast<double>(scores[id]) - max_score) * inv_t);
    probs_[id] = p;
    total += p;
  }
  if (options_.top_p < 1.0f) {
    // The most probable tokens until their share reaches top_p (at least one). Only as many are
    // sorted as that takes: a few dozen of a large vocabulary, not all of it.
    const double target = static_cast<double>(options_.top_p) * total;
    double kept = 0.0;
    size_t keep = 0;
    size_t want = std::min<size_t>(n, 64);
    while (true) {
      if (want > sorted) {
        std::nth_element(order_.begin() + sorted, order_.begin() + (want - 1),
                         order_.begin() + n, higher);
        std::sort(order_.begin() + sorted, order_.begin() + want, higher);
        sorted = want;
      }
      while (keep < sorted && kept < target) kept += probs_[order_[keep++]];
      if (kept >= target || sorted == n) break;
      want = std::min(n, want * 4);
    }
    n = keep;
    total = kept;
  }
  const double u = uniform() * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += probs_[order_[i]];
    if (cumulative > u) return order_[i];
  }
  return order_[n - 1];  // u within rounding of the total
}

}  // namespace generation
}  // namespace edgeshare
