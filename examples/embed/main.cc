// embed FOUNDATION.ptd PROGRAM.pte...: loads every program over the one foundation file, runs each
// on five tokens and prints the sum of its logits. `bazel run //:embed` passes the files the BUILD
// exported (from runfiles).

#include <cstdio>
#include <vector>

#include "run_lora.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: embed FOUNDATION.ptd PROGRAM.pte...\n");
    return 2;
  }
  std::vector<embed_example::LoraProgram> programs;
  for (int i = 2; i < argc; ++i) {
    auto program = embed_example::LoraProgram::load(argv[i], argv[1]);
    if (!program.ok()) {
      std::fprintf(stderr, "embed: %s\n", program.status().message());
      return 1;
    }
    programs.push_back(std::move(*program));
  }
  for (size_t i = 0; i < programs.size(); ++i) {
    auto sum = programs[i].run(5);
    if (!sum.ok()) {
      std::fprintf(stderr, "embed: %s: %s\n", argv[i + 2], sum.status().message());
      return 1;
    }
    std::printf("%s: logits sum %.6f\n", argv[i + 2], *sum);
  }
  std::printf("foundation files open: %zu\n", edgeshare::runtime::DataFile::open_count());
  return 0;
}
