// Text from a file, a tenant or the network, made safe to show on a terminal. Every string the CLI
// prints goes through terminal_text() at the place it is rendered (Table, the status and profile
// printers, the full-screen top, error messages), so a state file, a command line or the daemon's
// answer cannot set the title, clear the screen, write the clipboard (OSC 52) or move the cursor.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpuslice::cli {

// `text` as printable characters only: printable ASCII and well-formed UTF-8 at or above U+00A0
// stay; C0 controls, DEL, C1 controls in either encoding (the raw byte 0x9B and U+009B as C2 9B),
// bidirectional overrides and isolates, and bytes that are not well-formed UTF-8 each become '?'.
// At most `max_columns` characters: a longer text ends in "...". The result escapes to itself.
std::string terminal_text(std::string_view text, std::size_t max_columns = std::string_view::npos);

// The number of characters (code points) of a text terminal_text() returned: its width in a
// terminal's columns, wide East Asian characters aside.
std::size_t terminal_columns(std::string_view safe_text);

}  // namespace gpuslice::cli
