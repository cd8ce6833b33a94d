#pragma once
// Text from the inputs (speaker names, file and folder names, transcripts) shown on a terminal or
// in a markdown page: control characters made visible, so that a corpus cannot move the cursor,
// recolour or clear a user's terminal (`sluice cache inspect` once printed a speaker name's escape
// sequences raw), and markup made literal.
#include <string>
#include <string_view>

namespace sluice {

// ASCII control characters and DEL as \xNN, and the UTF-8 C1 controls (U+0080-U+009F; U+009B is
// a terminal's one-byte escape introducer) as \u00NN; every other byte as it is.
std::string printable(std::string_view text);

// printable(), with `&`, `<` and `>` as HTML entities: literal text in markdown, whose viewers
// render inline HTML.
std::string markdown_literal(std::string_view text);

}  // namespace sluice
