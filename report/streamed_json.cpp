#include "report/streamed_json.h"

#include <set>
#include <string_view>

namespace sluice::report {
namespace {

using nlohmann::json;

std::string indent(int depth) { return std::string(static_cast<size_t>(2 * depth), ' '); }

// `value` pretty-printed to stand at `depth`: nlohmann indents a dump from level 0, so every line
// after the first moves right (a string's newlines are escaped in the text, so only layout breaks).
void write_value(AtomicFileWriter& out, const json& value, int depth) {
  const std::string text = value.dump(2);
  const std::string margin = indent(depth);
  size_t from = 0;
  for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', from)) {
    out.write(std::string_view(text).substr(from, at + 1 - from));
    out.write(margin);
    from = at + 1;
  }
  out.write(std::string_view(text).substr(from));
}

void write_array(AtomicFileWriter& out, const StreamedJson::Array& array, int depth) {
  if (array.size == 0) {
    out.write("[]");
    return;
  }
  out.write("[\n");
  for (size_t i = 0; i < array.size; ++i) {
    out.write(indent(depth + 1));
    write_value(out, array.element(i), depth + 1);
    out.write(i + 1 < array.size ? ",\n" : "\n");
  }
  out.write(indent(depth) + "]");
}

}  // namespace

void StreamedJson::write(AtomicFileWriter& out, int depth) const {
  // Every key in nlohmann's order (an object is a std::map: sorted), whichever kind holds it.
  std::set<std::string> keys;
  for (const auto& item : members.items()) keys.insert(item.key());
  for (const auto& [key, array] : arrays) keys.insert(key);
  for (const auto& [key, object] : objects) keys.insert(key);
  if (keys.empty()) {
    out.write("{}");
    return;
  }
  out.write("{\n");
  size_t written = 0;
  for (const auto& key : keys) {
    out.write(indent(depth + 1) + json(key).dump() + ": ");
    if (const auto array = arrays.find(key); array != arrays.end()) {
      write_array(out, array->second, depth + 1);
    } else if (const auto object = objects.find(key); object != objects.end()) {
      object->second.write(out, depth + 1);
    } else {
      write_value(out, members.at(key), depth + 1);
    }
    out.write(++written < keys.size() ? ",\n" : "\n");
  }
  out.write(indent(depth) + "}");
}

json StreamedJson::to_json() const {
  json whole = members;
  for (const auto& [key, array] : arrays) {
    json elements = json::array();
    for (size_t i = 0; i < array.size; ++i) elements.push_back(array.element(i));
    whole[key] = std::move(elements);
  }
  for (const auto& [key, object] : objects) whole[key] = object.to_json();
  return whole;
}

}  // namespace sluice::report
