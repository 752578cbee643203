// printable_text: a message made safe to print. Messages name files, keys and methods, and a
// corrupt file's bytes (a key, a dtype, a method name) may reach them: control bytes and bytes that
// are not UTF-8 become \xNN, so a message stays one line of text (and Python can decode it).
//
//   std::fprintf(stderr, "%s\n", printable_text(status.message()).c_str());
//
// Valid UTF-8 (a path with accents) is kept as it is; a tab or newline is escaped too.

#ifndef EDGESHARE_TOOLS_PRINTABLE_TEXT_H_
#define EDGESHARE_TOOLS_PRINTABLE_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace edgeshare {
namespace tools {

// `text` with every control byte (below 0x20, 0x7f) and every byte outside a valid UTF-8 sequence
// written as \xNN; longer than max_bytes, it is cut (at a character) and ends in "...".
std::string printable_text(std::string_view text, size_t max_bytes = 4096);

}  // namespace tools
}  // namespace edgeshare

#endif  // EDGESHARE_TOOLS_PRINTABLE_TEXT_H_
