// What an embedder writes: load a LoRA program over a shared data file and run it once.

#ifndef EMBED_EXAMPLE_RUN_LORA_H_
#define EMBED_EXAMPLE_RUN_LORA_H_

#include "edgeshare/runtime/core/result.h"

namespace embed_example {

// Runs method "forward" of `pte` (its foundation weights in `ptd`) on an input of ones and returns
// the sum of its first output.
edgeshare::runtime::Result<double> run_lora(const char* pte, const char* ptd);

}  // namespace embed_example

#endif  // EMBED_EXAMPLE_RUN_LORA_H_
