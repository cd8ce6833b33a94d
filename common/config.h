#pragma once
// Configuration: one schema in code (runtime/settings.cpp declares every setting), loaded from a
// YAML file and `--set section.key=value` overrides.
//
// Contract: every key that is read must be declared in the schema with a type, a default that
// works on the quick start, and a help text. Unknown keys and wrong types are ConfigErrors that
// name the file, the line, the key and a close match. The effective configuration (defaults,
// file and overrides merged) can be written back as YAML next to every output.
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sluice::config {

enum class ValueType { integer, number, boolean, string };

const char* to_string(ValueType type);

struct Setting {
  Setting() = default;
  // A constructor, not aggregate initialisation, so that a schema line may leave out the choices
  // and bounds without a missing-initializer warning.
  Setting(std::string key_, ValueType type_, std::string default_value_, std::string help_,
          std::vector<std::string> choices_ = {}, double min_ = -1e300, double max_ = 1e300)
      : key(std::move(key_)), type(type_), default_value(std::move(default_value_)), help(std::move(help_)),
        choices(std::move(choices_)), min(min_), max(max_) {}

  std::string key;            // "section.name"
  ValueType type = ValueType::string;
  std::string default_value;  // YAML scalar text; "" for an empty string
  std::string help;
  std::vector<std::string> choices;  // allowed values of a string setting; empty = any
  double min = -1e300;               // inclusive bounds of numeric settings
  double max = 1e300;
};

class Schema {
 public:
  Schema& add(Setting setting);
  const Setting* find(const std::string& key) const;
  const std::vector<Setting>& settings() const { return settings_; }
  std::vector<std::string> keys() const;

  // A Markdown table per section: the configuration reference in docs/configuration.md.
  std::string reference_markdown() const;

 private:
  std::vector<Setting> settings_;
};

// One setting's value and where it came from ("default", "FILE:LINE" or "--set").
struct Value {
  std::string text;
  std::string origin;
};

class Config {
 public:
  // Loads `path` (may be empty: defaults only), then applies overrides "section.key=value" in
  // order. Throws ConfigError on an unreadable file, bad YAML, unknown keys, wrong types,
  // values outside their bounds or choices.
  static Config load(const Schema& schema, const std::filesystem::path& path,
                     const std::vector<std::string>& overrides);

  // Typed getters; the key must be in the schema (a missing key is a programming error).
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  bool boolean(const std::string& key) const;
  const std::string& string(const std::string& key) const;

  // Replaces one value as if given with --set; validated the same way.
  void set(const std::string& key, const std::string& value, const std::string& origin);

  const std::string& origin(const std::string& key) const;

  // The effective configuration, typed, nested by section.
  nlohmann::json to_json() const;
  // The effective configuration as YAML with each value's origin as a comment.
  std::string to_yaml() const;
  // Writes to_yaml() atomically (temp file + rename).
  void write(const std::filesystem::path& path) const;
  // Every value with its origin, {"section.key": [text, origin]}: a config sent to another
  // process, which must tell what its user gave from the defaults as this one does.
  nlohmann::json to_wire() const;
  // The config to_wire() made: defaults stay defaults, every other value is validated against
  // `schema` and keeps its origin.
  static Config from_wire(const Schema& schema, const nlohmann::json& wire);

  const std::filesystem::path& source_file() const { return source_file_; }

 private:
  const Setting& declared(const std::string& key) const;

  const Schema* schema_ = nullptr;
  std::filesystem::path source_file_;
  std::map<std::string, Value> values_;
};

}  // namespace sluice::config
