#pragma once
// Suggestions for misspelt names ("did you mean ...?") in config keys and command arguments.
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// Levenshtein distance: insertions, deletions and substitutions each cost 1.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or "" when none is close enough to be a plausible typo
// (distance above a third of the word's length, at least 2).
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace sluice
