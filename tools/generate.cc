// generate: decoding with a program's stateful method (its KV cache), token ids in and out.
//
//   bazel run //tools:generate -- --program a.pte --data foundation.ptd --prompt "Once upon a time"
//   bazel run //tools:generate -- --program a.pte --data foundation.ptd --prompt-ids prompt.npy
//       --max-new-tokens 32 [--ids] [--json out.json] [--method forward_cached] [--eos-id N]...
//       [--stop TEXT]... [--temperature T --top-k K --top-p P --repetition-penalty R --seed S]
//       [--verbose] [--threads N] [--no-share] [--no-verify] [--swap-adapter X.ptd]...
//       [--warmup-tokens N]
//
// --prompt TEXT is encoded with the tokenizer beside the program (the export folder's
// tokenizer.json, C++ byte-level BPE, or else its SentencePiece tokenizer.model:
// generation::load_tokenizer) and the new text is printed as it is generated, whole characters at
// a time (--ids prints the ids instead); --prompt-ids takes an int64 .npy of shape [P] or [1, P]. Without a tokenizer only ids
// go in and out; a tokenizer that cannot be read only keeps text out (a warning) when ids are given.
// Greedy by default; --temperature > 0 samples (generation::Sampler, the one Python's
// Method.generate uses: a seed gives the same tokens in both); without --seed a fresh seed is
// drawn (std::random_device) and reported (--json's "seed", --verbose), so --seed repeats the run.
// Generation stops after an end token: --eos-id (repeatable), or by default the eos_token_id of the
// generation_config.json beside each program (export_lora copies the model's), or once the text
// holds a --stop TEXT (left out of the text), all finish reason "stop"; after --max-new-tokens or
// where the sequence reaches the method's length (--max-seq-len, said on stderr too), "length".
// Prints the new text (or token ids), the prefill time and decode tokens/s; --json writes
// {"tokens": [...], "prefill_ms": ..., "decode_tokens_per_s": ..., "finish_reason": ...} and "text"
// with a tokenizer, "seed" when sampling. With several --program, each
// generates from the same prompt (all loaded first, over the shared data files), and the JSON has
// one such object per program name. --swap-adapter (repeatable, for a `--swappable` lora.pte):
// each adapter .ptd is bound in turn to every program that reads swappable weights (nothing of the
// foundation fetched or packed, the KV cache reset) and each such program generates again; the
// JSON gains "swaps": [{"adapter": path, "program": name, "tokens": [...], ...}, ...] in order.
// --warmup-tokens N runs an untimed generation of N tokens first (the state is reset before the
// timed one), so the timed prefill is a warm call as in a long-running server, not the first
// touch of the planned memory and the mapped weights; --json gains that run's "first_prefill_ms".
// A bad file, a method without a KV cache, a prompt past the exported length or an adapter of
// another structure is a one-line error, exit 1.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/generation/tokenizers.h"
#include "edgeshare/generation/generator.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/tools/npy.h"
#include "edgeshare/tools/program_set.h"
#include "edgeshare/tools/program_set_flags.h"

namespace edgeshare {
namespace tools {
namespace {

using generation::Generation;
using generation::Generator;
using runtime::DataFile;
using runtime::Error;
using runtime::Method;
using runtime::Result;
using runtime::ScalarType;
using runtime::Span;
using runtime::Status;

struct Options {
  ProgramSetFlags set;
  std::string prompt_ids;
  std::string prompt;  // --prompt TEXT
  bool print_ids = false;
  int max_new_tokens = 32;
  std::string json;
  std::string method = "forward_cached";
  std::vector<long long> eos_ids;           // --eos-id, repeated; none: generation_config.json's.
  std::vector<std::string> stops;           // --stop, repeated.
  generation::SamplingOptions sampling;
  bool seed_given = false;
  bool verbose = false;
  int warmup_tokens = 0;
  std::vector<std::string> swap_adapters;  // --swap-adapter, repeated, in order.
};

void DeclareFlags(CLI::App& app, Options& options) {
  add_program_set_flags(app, options.set);
  CLI::Option* ids = app.add_option("--prompt-ids", options.prompt_ids,
                                    "int64 .npy of prompt token ids, [P] or [1, P]");
  CLI::Option* text = app.add_option(
      "--prompt", options.prompt, "prompt text (encoded with the tokenizer beside the program)");
  ids->excludes(text);
  text->excludes(ids);
  app.add_flag("--ids", options.print_ids, "print token ids rather than text");
  app.add_option("--max-new-tokens", options.max_new_tokens,
                 "tokens to generate at most (fewer where the sequence reaches the length the "
                 "program was exported for, --max-seq-len: finish reason length)")
      ->capture_default_str()
      ->check(integer_in(0, 1000000));
  app.add_option("--json", options.json,
                 "write tokens, prefill_ms, decode_tokens_per_s, finish_reason (and text, seed)");
  app.add_option("--method", options.method, "the stateful method to generate with");
  app.add_option("--eos-id", options.eos_ids,
                 "stop after this token; repeat for more (default: the eos_token_id of the "
                 "generation_config.json beside the program, else never)")
      ->check(integer_in(0, INT64_MAX))
      ->allow_extra_args(false);
  app.add_option("--temperature", options.sampling.temperature, "0: greedy; > 0 samples")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", options.sampling.top_k, "sample among the k most probable (0: all)")
      ->check(integer_in(0, INT32_MAX));
  app.add_option("--top-p", options.sampling.top_p,
                 "sample among the most probable tokens whose probability reaches p (1: all)")
      ->check(CLI::Range(0.000001f, 1.0f));
  app.add_option("--repetition-penalty", options.sampling.repetition_penalty,
                 "transformers' penalty on tokens already seen (1: none)")
      ->check(CLI::Range(0.000001f, 1000.0f));
  app.add_option("--stop", options.stops,
                 "stop once the text holds this (left out of the text); repeat for more")
      ->allow_extra_args(false);
  app.add_option("--seed", options.sampling.seed,
                 "the sampler's seed (a seeded run repeats; default: a fresh one, reported)");
  app.add_flag("--verbose", options.verbose, "say the seed and why generation ended on stderr");
  app.add_option("--warmup-tokens", options.warmup_tokens,
                 "an untimed generation of this many tokens before the timed one (default 0)")
      ->check(integer_in(0, 1000000));
  app.add_option("--swap-adapter", options.swap_adapters,
                 "an adapter .ptd to bind next (a --swappable lora.pte) and generate again; repeat")
      ->allow_extra_args(false);
}

Result<std::vector<int64_t>> ReadPrompt(const std::string& path) {
  ES_ASSIGN_OR_RETURN(NpyArray array, read_npy(path));
  ES_CHECK_OR_RETURN_ERROR(array.dtype == ScalarType::Long, Error::InvalidArgument,
                           "%s: prompt ids must be int64, not %s", path.c_str(),
                           runtime::to_string(array.dtype));
  ES_CHECK_OR_RETURN_ERROR(
      array.shape.size() == 1 || (array.shape.size() == 2 && array.shape[0] == 1),
      Error::InvalidArgument, "%s: prompt ids must have shape [P] or [1, P]", path.c_str());
  ES_CHECK_OR_RETURN_ERROR(!array.data.empty(), Error::InvalidArgument,
                           "%s: the prompt is empty (no token ids)", path.c_str());
  std::vector<int64_t> ids(array.data.size() / sizeof(int64_t));
  if (!ids.empty()) std::memcpy(ids.data(), array.data.data(), ids.size() * sizeof(int64_t));
  return ids;
}

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

// The end tokens of the generation_config.json in the folder of `program_path` (eos_token_id: an id
// or a list of ids); none without the file or the key.
Result<std::vector<int64_t>> EndTokens(const std::string& program_path) {
  const std::string path = FolderOf(program_path) + "generation_config.json";
  std::ifstream file(path);
  if (!file.is_open()) return std::vector<int64_t>();
  const nlohmann::json config = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  ES_CHECK_OR_RETURN_ERROR(config.is_object(), Error::InvalidArgument, "%s is not a JSON object",
                           path.c_str());
  std::vector<int64_t> ids;
  const auto eos = config.find("eos_token_id");
  if (eos == config.end() || eos->is_null()) return ids;
  const nlohmann::json list = eos->is_array() ? *eos : nlohmann::json::array({*eos});
  for (const nlohmann::json& id : list) {
    ES_CHECK_OR_RETURN_ERROR(id.is_number_unsigned(), Error::InvalidArgument,
                             "%s: eos_token_id must be a token id or a list of them",
                             path.c_str());
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

// The tokenizer beside each program (tokenizer.json, else a SentencePiece tokenizer.model), loaded
// once per folder (null without one).
class Tokenizers {
 public:
  Result<const generation::Tokenizer*> for_program(const std::string& program_path) {
    const std::string folder = FolderOf(program_path);
    auto found = by_folder_.find(folder);
    if (found != by_folder_.end()) return found->second.get();
    ES_ASSIGN_OR_RETURN(std::unique_ptr<generation::Tokenizer> tokenizer,
                        generation::load_tokenizer(folder));
    return (by_folder_[folder] = std::move(tokenizer)).get();
  }

  // The tokenizer when it can be read; otherwise null, after one warning per folder on stderr:
  // token ids still go in and out.
  const generation::Tokenizer* if_readable(const std::string& program_path) {
    Result<const generation::Tokenizer*> tokenizer = for_program(program_path);
    if (tokenizer.ok()) return *tokenizer;
    if (warned_.insert(FolderOf(program_path)).second) {
      std::fprintf(stderr, "generate: warning: %s; text is unavailable, printing token ids\n",
                   tokenizer.status().message());
    }
    return nullptr;
  }

 private:
  std::map<std::string, std::unique_ptr<generation::Tokenizer>> by_folder_;
  std::set<std::string> warned_;
};

// Holds back text that may begin a stop string and cuts the text where one appears.
class StopText {
 public:
  explicit StopText(const std::vector<std::string>& stops) : stops_(stops) {}

  // Adds `piece`; returns the text that can be shown now.
  std::string push(const std::string& piece) {
    held_ += piece;
    if (stops_.empty()) return std::move(held_);
    size_t cut = std::string::npos;
    for (const std::string& stop : stops_) {
      if (!stop.empty()) cut = std::min(cut, held_.find(stop));
    }
    if (cut != std::string::npos) {
      stopped_ = true;
      std::string shown = held_.substr(0, cut);
      held_.clear();
      return shown;
    }
    size_t hold = 0;  // the longest end of held_ that begins a stop string
    for (const std::string& stop : stops_) {
      if (stop.empty()) continue;
      for (size_t n = std::min(stop.size() - 1, held_.size()); n > hold; --n) {
        if (held_.compare(held_.size() - n, n, stop, 0, n) == 0) {
          hold = n;
          break;
        }
      }
    }
    std::string shown = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    return shown;
  }
  std::string finish() { return std::move(held_); }
  bool stopped() const { return stopped_; }

 private:
  const std::vector<std::string>& stops_;
  std::string held_;
  bool stopped_ = false;
};

Result<Method*> FindMethod(LoadedProgram& entry, const std::string& name) {
  std::string available;
  for (Method& method : entry.methods) {
    if (name == method.name()) return &method;
    available += (available.empty() ? "" : ", ") + std::string(method.name());
  }
  return Status::Format(Error::InvalidArgument, "%s has no method '%s' (methods: %s)",
                        entry.path.c_str(), name.c_str(), available.c_str());
}

Status WriteJson(const std::string& path, const nlohmann::json& json) {
  // A name from a file that is not UTF-8 is written with U+FFFD rather than failing the dump.
  const std::string text =
      json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::FILE* f = std::fopen(path.c_str(), "w");
  ES_CHECK_OR_RETURN_ERROR(f != nullptr, Error::AccessFailed, "cannot write %s", path.c_str());
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  ES_CHECK_OR_RETURN_ERROR(written && closed, Error::AccessFailed, "cannot write %s", path.c_str());
  return Status();
}

nlohmann::json ToJson(const Generation& out) {
  return {{"tokens", out.tokens},
          {"prefill_ms", out.prefill_ms},
          {"decode_tokens_per_s", out.decode_tokens_per_s},
          {"finish_reason", generation::finish_reason_name(out.finish_reason)}};
}

bool Samples(const generation::SamplingOptions& sampling) {
  return sampling.temperature > 0.0f && sampling.top_k != 1;
}

// Generates with `entry`'s method and prints under `label` its text as it comes (with a tokenizer,
// unless --ids) or its tokens; returns them as JSON.
Result<nlohmann::json> GenerateWith(const Options& options, LoadedProgram& entry,
                                    const std::string& label, const std::vector<int64_t>& ids,
                                    Tokenizers& tokenizers) {
  ES_ASSIGN_OR_RETURN(Method * method, FindMethod(entry, options.method));
  std::vector<int64_t> prompt = ids;
  const bool text_in = !options.prompt.empty() || prompt.empty();
  const generation::Tokenizer* tokenizer = nullptr;
  if (text_in) {
    ES_ASSIGN_OR_RETURN(tokenizer, tokenizers.for_program(entry.path));
  } else {
    tokenizer = tokenizers.if_readable(entry.path);  // ids in: text out only where it can be
  }
  ES_CHECK_OR_RETURN_ERROR(options.stops.empty() || tokenizer != nullptr, Error::InvalidArgument,
                           "--stop: there is no readable tokenizer beside %s to decode text with",
                           entry.path.c_str());
  if (text_in) {
    ES_CHECK_OR_RETURN_ERROR(tokenizer != nullptr, Error::InvalidArgument,
                             "--prompt: there is no tokenizer.json or tokenizer.model beside %s "
                             "(export with a model directory that has one, or give --prompt-ids)",
                             entry.path.c_str());
    ES_ASSIGN_OR_RETURN(prompt, tokenizer->encode(options.prompt));
    ES_CHECK_OR_RETURN_ERROR(!prompt.empty(), Error::InvalidArgument,
                             "--prompt: the text has no tokens");
  }
  ES_ASSIGN_OR_RETURN(Generator generator, Generator::create(method));
  generation::GenerateOptions generate;
  generate.max_new_tokens = static_cast<size_t>(options.max_new_tokens);
  generate.sampling = options.sampling;
  if (options.eos_ids.empty()) {
    ES_ASSIGN_OR_RETURN(generate.stop_ids, EndTokens(entry.path));
  } else {
    generate.stop_ids.assign(options.eos_ids.begin(), options.eos_ids.end());
  }
  const bool as_text = tokenizer != nullptr && !options.print_ids;
  std::printf("%s:%s", label.c_str(), as_text ? "\n" : "");
  std::fflush(stdout);
  std::unique_ptr<generation::TextStream> stream;
  StopText stops(options.stops);
  std::string piece;
  std::string text;
  generation::TokenCallback print;
  if (tokenizer != nullptr && (as_text || !options.stops.empty())) {
    piece.reserve(64);
    stream = tokenizer->stream();
    print = [&](int64_t token) {
      piece.clear();
      stream->add(token, &piece);
      const std::string shown = stops.push(piece);
      if (!shown.empty()) {
        if (as_text) {
          std::fwrite(shown.data(), 1, shown.size(), stdout);
          std::fflush(stdout);
        }
        text += shown;
      }
      return !stops.stopped();
    };
  }
  const Span<const int64_t> prompt_ids(prompt.data(), prompt.size());
  double first_prefill_ms = -1.0;
  if (options.warmup_tokens > 0) {
    generation::GenerateOptions warmup = generate;
    warmup.max_new_tokens = static_cast<size_t>(options.warmup_tokens);
    warmup.stop_ids.clear();
    ES_ASSIGN_OR_RETURN(Generation warm, generator.generate(prompt_ids, warmup, nullptr));
    first_prefill_ms = warm.prefill_ms;
  }
  ES_ASSIGN_OR_RETURN(Generation out, generator.generate(prompt_ids, generate, print));
  if (stream != nullptr && !stops.stopped()) {
    piece.clear();
    stream->finish(&piece);
    std::string shown = stops.push(piece);
    if (!stops.stopped()) shown += stops.finish();
    if (as_text) std::fwrite(shown.data(), 1, shown.size(), stdout);
    text += shown;
  }
  if (!as_text) {
    for (int64_t token : out.tokens) std::printf(" %lld", static_cast<long long>(token));
  }
  std::printf("\n  prefill %.3f ms (%zu tokens), decode %.1f tokens/s\n", out.prefill_ms,
              prompt.size(), out.decode_tokens_per_s);
  std::fflush(stdout);
  if (out.finish_reason == generation::FinishReason::kSequenceBound) {
    std::fprintf(stderr,
                 "generate: %s: stopped after %zu new tokens: the sequence reached the %zu tokens "
                 "method '%s' was exported for (--max-seq-len); finish reason length\n",
                 label.c_str(), out.tokens.size(), generator.max_length(), options.method.c_str());
  }
  const bool sampled = Samples(options.sampling);
  if (options.verbose) {
    std::fprintf(stderr, "generate: %s: finish reason %s",
                 label.c_str(), generation::finish_reason_name(out.finish_reason));
    if (sampled) {
      std::fprintf(stderr, ", seed %llu (--seed repeats it)",
                   static_cast<unsigned long long>(options.sampling.seed));
    }
    std::fprintf(stderr, "\n");
  }
  nlohmann::json json = ToJson(out);
  if (stops.stopped()) json["finish_reason"] = "stop";
  if (sampled) json["seed"] = options.sampling.seed;
  if (tokenizer != nullptr) {
    json["text"] = stream != nullptr ? text
                                     : tokenizer->decode(Span<const int64_t>(out.tokens.data(),
                                                                             out.tokens.size()));
  }
  if (first_prefill_ms >= 0.0) json["first_prefill_ms"] = first_prefill_ms;
  return json;
}

// --swap-adapter: each file bound in turn to every program that takes it, which generates again.
// `adapters` keeps the files open (declared before the program set: the methods read them).
Result<nlohmann::json> SwapAndGenerate(const Options& options, ProgramSet& set,
                                       const std::vector<int64_t>& prompt,
                                       std::vector<std::shared_ptr<const DataFile>>& adapters,
                                       Tokenizers& tokenizers) {
  nlohmann::json swaps = nlohmann::json::array();
  for (const std::string& path : options.swap_adapters) {
    ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> file, DataFile::open(path.c_str()));
    adapters.push_back(file);
    bool any = false;
    for (size_t p = 0; p < set.programs().size(); ++p) {
      ES_ASSIGN_OR_RETURN(const bool taken, set.bind_adapter(p, *file, file->map()));
      if (!taken) continue;
      any = true;
      LoadedProgram& entry = set.programs()[p];
      ES_ASSIGN_OR_RETURN(nlohmann::json out,
                          GenerateWith(options, entry, entry.name + "@" + path, prompt,
                                       tokenizers));
      out["adapter"] = path;
      out["program"] = entry.name;
      swaps.push_back(std::move(out));
    }
    ES_CHECK_OR_RETURN_ERROR(any, Error::InvalidArgument,
                             "--swap-adapter %s: no program loaded reads swappable weights "
                             "(export with export_lora --swappable)",
                             path.c_str());
  }
  return swaps;
}

Status Run(const Options& options) {
  xnnpack::set_weight_sharing(options.set.share);
  xnnpack::set_verify_content(options.set.verify);
  if (!options.json.empty()) {
    ES_RETURN_IF_ERROR(check_unique_program_names(options.set.programs, "--json"));
  }
  ES_CHECK_OR_RETURN_ERROR(options.prompt_ids.empty() != options.prompt.empty(),
                           Error::InvalidArgument, "give --prompt TEXT or --prompt-ids FILE");
  std::vector<int64_t> prompt;  // Empty with --prompt: each program's tokenizer encodes it.
  if (!options.prompt_ids.empty()) {
    ES_ASSIGN_OR_RETURN(prompt, ReadPrompt(options.prompt_ids));
  }
  Tokenizers tokenizers;
  std::vector<std::shared_ptr<const DataFile>> adapters;  // Outlives `set`.
  ES_ASSIGN_OR_RETURN(ProgramSet set, ProgramSet::open(options.set.data_files,
                                                       static_cast<size_t>(options.set.threads)));
  // Only the method generation runs is loaded: a program's other methods would hold memory unused.
  for (const std::string& path : options.set.programs) {
    ES_RETURN_IF_ERROR(set.add(path, options.method));
  }

  nlohmann::json by_program = nlohmann::json::object();
  for (LoadedProgram& entry : set.programs()) {
    ES_ASSIGN_OR_RETURN(by_program[entry.name],
                        GenerateWith(options, entry, entry.name, prompt, tokenizers));
  }
  ES_ASSIGN_OR_RETURN(nlohmann::json swaps,
                      SwapAndGenerate(options, set, prompt, adapters, tokenizers));
  if (options.json.empty()) return Status();
  // One program: the object itself; several: one object per program name.
  nlohmann::json json = set.programs().size() == 1 ? by_program.begin().value() : by_program;
  if (!options.swap_adapters.empty()) json["swaps"] = std::move(swaps);
  return WriteJson(options.json, json);
}

}  // namespace
}  // namespace tools
}  // namespace edgeshare

int main(int argc, char** argv) {
  using namespace edgeshare;
  CLI::App app{"Generation with a program's KV-cache method, token ids in and out.",
               "generate"};
  tools::Options options;
  tools::DeclareFlags(app, options);
  return tools::run_tool(app, argc, argv, [&] {
    options.seed_given = app.count("--seed") > 0;
    if (!options.seed_given && tools::Samples(options.sampling)) {
      // A fresh seed per unseeded sampled run, as llama.cpp and transformers do; it is reported.
      std::random_device device;
      options.sampling.seed = (static_cast<uint64_t>(device()) << 32) ^ device();
    }
    for (std::string& path : options.set.programs) path = tools::user_path(path);
    for (std::string& path : options.set.data_files) path = tools::user_path(path);
    if (!options.prompt_ids.empty()) options.prompt_ids = tools::user_path(options.prompt_ids);
    options.json = tools::user_path(options.json);
    for (std::string& path : options.swap_adapters) path = tools::user_path(path);
    return tools::Run(options);
  });
}
