#pragma once
// A JSON object written out member by member, its long arrays one element at a time, in the same
// bytes as nlohmann's dump(2) of the whole object. report.json holds an entry per rank (model and
// data ranks, CPU, fates): at 16,384 ranks its text is ~500 MB and nlohmann's tree of it several
// times that, next to the analysis it is made from. Made this way, only one rank's entry is a tree
// at a time, and the text goes to the file in pieces (AtomicFileWriter).
#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace sluice::report {

struct StreamedJson {
  // An array member made one element at a time, as it is written.
  struct Array {
    size_t size = 0;
    std::function<nlohmann::json(size_t)> element;
  };

  nlohmann::json members = nlohmann::json::object();  // the small members, as they are
  std::map<std::string, Array> arrays;
  std::map<std::string, StreamedJson> objects;          // members that hold long arrays themselves

  // The whole object as text, as nlohmann's dump(2) of to_json() would write it (keys sorted, two
  // spaces a level); `depth` is the indentation level of the object's own braces.
  void write(AtomicFileWriter& out, int depth = 0) const;
  // The whole object as one tree (tests, and small runs that want it in memory).
  nlohmann::json to_json() const;
};

}  // namespace sluice::report
