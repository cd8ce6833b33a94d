#include "common/config.h"

#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/file_util.h"
#include "common/text_match.h"

namespace sluice::config {
namespace {

std::string where(const std::filesystem::path& file, const YAML::Mark& mark) {
  // yaml-cpp marks are 0-based; editors count lines from 1.
  return file.string() + ":" + std::to_string(mark.line + 1);
}

std::string suggestion(const std::string& key, const Schema& schema) {
  std::string close = closest_match(key, schema.keys());
  return close.empty() ? "" : "; did you mean '" + close + "'?";
}

// Checks that `text` parses as `setting`'s type and lies within its bounds or choices.
void validate(const Setting& setting, const std::string& text, const std::string& origin) {
  auto fail = [&](const std::string& what) {
    throw ConfigError(origin + ": " + setting.key + " " + what + " (" + setting.help + ")");
  };
  YAML::Node node = YAML::Load(text.empty() ? "''" : text);
  double numeric = 0;
  try {
    switch (setting.type) {
      case ValueType::integer: numeric = static_cast<double>(node.as<int64_t>()); break;
      case ValueType::number: numeric = node.as<double>(); break;
      case ValueType::boolean: node.as<bool>(); return;
      case ValueType::string: node.as<std::string>(); break;
    }
  } catch (const YAML::Exception&) {
    fail(std::string("must be ") + (setting.type == ValueType::integer ? "an " : "a ") +
         to_string(setting.type) + ", got '" + text + "'");
  }
  if (setting.type == ValueType::string) {
    if (!setting.choices.empty() &&
        std::find(setting.choices.begin(), setting.choices.end(), text) == setting.choices.end()) {
      std::string list;
      for (const auto& choice : setting.choices) list += (list.empty() ? "" : ", ") + choice;
      std::string close = closest_match(text, setting.choices);
      fail("must be one of {" + list + "}, got '" + text + "'" +
           (close.empty() ? "" : "; did you mean '" + close + "'?"));
    }
    return;
  }
  if (!std::isfinite(numeric) || numeric < setting.min || numeric > setting.max) {
    // Bounds as a person writes them (1048576, not the stream's 1.04858e+06); a side the schema
    // leaves open (+-1e300) is not spelt out.
    auto bound = [](double value) {
      std::ostringstream out;
      out << std::setprecision(15) << value;
      return out.str();
    };
    const bool open_above = setting.max >= 1e300;
    const bool open_below = setting.min <= -1e300;
    const std::string range = open_above   ? "must be at least " + bound(setting.min)
                              : open_below ? "must be at most " + bound(setting.max)
                                           : "must be in [" + bound(setting.min) + ", " + bound(setting.max) + "]";
    fail(range + ", got " + text);
  }
}

void walk(const YAML::Node& node, const std::string& prefix, const std::filesystem::path& file,
          const Schema& schema, std::map<std::string, Value>& values) {
  for (const auto& item : node) {
    const std::string name = item.first.as<std::string>();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    const YAML::Node& value = item.second;
    if (value.IsMap()) {
      walk(value, key, file, schema, values);
      continue;
    }
    const Setting* setting = schema.find(key);
    if (setting == nullptr) {
      throw ConfigError(where(file, item.first.Mark()) + ": unknown key '" + key + "'" +
                        suggestion(key, schema) + " (`sluice config reference` lists every key)");
    }
    if (!value.IsScalar() && !value.IsNull()) {
      throw ConfigError(where(file, value.Mark()) + ": " + key + " must be a single " +
                        to_string(setting->type) + ", not a list or map");
    }
    const std::string text = value.IsNull() ? "" : value.Scalar();
    validate(*setting, text, where(file, value.Mark()));
    values[key] = Value{text, where(file, value.Mark())};
  }
}

}  // namespace

const char* to_string(ValueType type) {
  switch (type) {
    case ValueType::integer: return "integer";
    case ValueType::number: return "number";
    case ValueType::boolean: return "boolean";
    case ValueType::string: return "string";
  }
  return "value";
}

Schema& Schema::add(Setting setting) {
  settings_.push_back(std::move(setting));
  return *this;
}

const Setting* Schema::find(const std::string& key) const {
  for (const auto& setting : settings_) {
    if (setting.key == key) return &setting;
  }
  return nullptr;
}

std::vector<std::string> Schema::keys() const {
  std::vector<std::string> result;
  for (const auto& setting : settings_) result.push_back(setting.key);
  return result;
}

std::string Schema::reference_markdown() const {
  std::ostringstream out;
  std::string section;
  for (const auto& setting : settings_) {
    const std::string this_section = setting.key.substr(0, setting.key.find('.'));
    if (this_section != section) {
      section = this_section;
      out << "\n## `" << section << "`\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
    }
    std::string type = to_string(setting.type);
    if (!setting.choices.empty()) {
      type.clear();
      for (const auto& choice : setting.choices) type += (type.empty() ? "" : " \\| ") + choice;
    }
    out << "| `" << setting.key << "` | " << type << " | `"
        << (setting.default_value.empty() ? "\"\"" : setting.default_value) << "` | "
        << setting.help << " |\n";
  }
  return out.str();
}

Config Config::load(const Schema& schema, const std::filesystem::path& path,
                    const std::vector<std::string>& overrides) {
  Config config;
  config.schema_ = &schema;
  config.source_file_ = path;
  for (const auto& setting : schema.settings()) {
    config.values_[setting.key] = Value{setting.default_value, "default"};
  }
  if (!path.empty()) {
    if (!std::filesystem::exists(path)) {
      throw ConfigError("config file " + path.string() + " does not exist");
    }
    YAML::Node root;
    try {
      root = YAML::LoadFile(path.string());
    } catch (const YAML::Exception& error) {
      throw ConfigError(where(path, error.mark) + ": not valid YAML: " + error.msg);
    }
    if (!root.IsNull()) {
      if (!root.IsMap()) {
        throw ConfigError(path.string() + ": the top level must be a map of sections");
      }
      walk(root, "", path, schema, config.values_);
    }
  }
  for (const auto& assignment : overrides) {
    const auto equals = assignment.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw ConfigError("--set " + assignment + ": expected section.key=value");
    }
    config.set(assignment.substr(0, equals), assignment.substr(equals + 1), "--set");
  }
  return config;
}

nlohmann::json Config::to_wire() const {
  nlohmann::json wire = nlohmann::json::object();
  for (const auto& [key, value] : values_) wire[key] = {value.text, value.origin};
  return wire;
}

Config Config::from_wire(const Schema& schema, const nlohmann::json& wire) {
  Config config = load(schema, "", {});
  for (const auto& [key, value] : wire.items()) {
    const std::string origin = value.at(1).get<std::string>();
    if (origin != "default") config.set(key, value.at(0).get<std::string>(), origin);
  }
  return config;
}

void Config::set(const std::string& key, const std::string& value, const std::string& origin) {
  const Setting* setting = schema_->find(key);
  if (setting == nullptr) {
    throw ConfigError(origin + ": unknown key '" + key + "'" + suggestion(key, *schema_));
  }
  validate(*setting, value, origin + " " + key + "=" + value);
  values_[key] = Value{value, origin};
}

const Setting& Config::declared(const std::string& key) const {
  const Setting* setting = schema_->find(key);
  if (setting == nullptr) {
    throw Error(ErrorKind::internal, "setting '" + key + "' is read but not declared in the schema");
  }
  return *setting;
}

int64_t Config::integer(const std::string& key) const {
  declared(key);
  return YAML::Load(values_.at(key).text).as<int64_t>();
}

double Config::number(const std::string& key) const {
  declared(key);
  return YAML::Load(values_.at(key).text).as<double>();
}

bool Config::boolean(const std::string& key) const {
  declared(key);
  return YAML::Load(values_.at(key).text).as<bool>();
}

const std::string& Config::string(const std::string& key) const {
  declared(key);
  return values_.at(key).text;
}

const std::string& Config::origin(const std::string& key) const {
  declared(key);
  return values_.at(key).origin;
}

nlohmann::json Config::to_json() const {
  nlohmann::json result = nlohmann::json::object();
  for (const auto& setting : schema_->settings()) {
    const auto dot = setting.key.find('.');
    auto& section = result[setting.key.substr(0, dot)];
    const std::string name = setting.key.substr(dot + 1);
    switch (setting.type) {
      case ValueType::integer: section[name] = integer(setting.key); break;
      case ValueType::number: section[name] = number(setting.key); break;
      case ValueType::boolean: section[name] = boolean(setting.key); break;
      case ValueType::string: section[name] = string(setting.key); break;
    }
  }
  return result;
}

std::string Config::to_yaml() const {
  std::ostringstream out;
  out << "# Effective sluice configuration: defaults, "
      << (source_file_.empty() ? std::string("no file") : source_file_.string())
      << " and --set overrides. Each value's origin follows it.\n";
  std::string section;
  for (const auto& setting : schema_->settings()) {
    const auto dot = setting.key.find('.');
    if (setting.key.substr(0, dot) != section) {
      section = setting.key.substr(0, dot);
      out << section << ":\n";
    }
    const Value& value = values_.at(setting.key);
    YAML::Emitter scalar;
    scalar << value.text;
    out << "  " << setting.key.substr(dot + 1) << ": "
        << (setting.type == ValueType::string ? std::string(scalar.c_str()) : value.text)
        << "  # " << value.origin << "\n";
  }
  return out.str();
}

void Config::write(const std::filesystem::path& path) const { write_file_atomically(path, to_yaml()); }

}  // namespace sluice::config
