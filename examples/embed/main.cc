#include <cstdio>

#include "run_lora.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: embed PROGRAM.pte DATA.ptd\n");
    return 2;
  }
  auto sum = embed_example::run_lora(argv[1], argv[2]);
  if (!sum.ok()) {
    std::fprintf(stderr, "embed: %s\n", sum.status().message());
    return 1;
  }
  std::printf("forward output sum: %.6f\n", *sum);
  return 0;
}
