#include "dataset/phonemizer.h"

#include <array>
#include <filesystem>
#include <mutex>
#include <vector>

#include <espeak-ng/speak_lib.h>

#include "common/error.h"
#include "common/log.h"
#include "dataset/language.h"
#include "dataset/text_normalizer.h"

namespace sluice::dataset {
namespace {

// The one lock around every espeak-ng call in the process (see the header), and the state it
// guards.
std::mutex& espeak_mutex() {
  static std::mutex mutex;
  return mutex;
}

struct EspeakState {
  bool initialised = false;
  std::string data_directory;  // as espeak-ng resolved it
  std::string engine_version;  // "espeak-ng 1.51"
  std::string voice;           // currently selected; switching voices reloads dictionaries
};

EspeakState& espeak_state() {
  static EspeakState state;
  return state;
}

// Callers hold espeak_mutex().
void select_voice(const std::string& voice) {
  EspeakState& state = espeak_state();
  if (state.voice == voice) return;
  const espeak_ERROR result = espeak_SetVoiceByName(voice.c_str());
  if (result != EE_OK) {
    state.voice.clear();
    throw ConfigError("espeak-ng cannot load voice \"" + voice + "\" (espeak_ERROR " +
                      std::to_string(result) + ") from data directory \"" + state.data_directory +
                      "\"; check that espeak-ng-data is installed there");
  }
  state.voice = voice;
}

bool is_clause_punctuation(char c) {
  return c == ',' || c == '.' || c == '!' || c == '?' || c == ';' || c == ':';
}

// Drops espeak's language-switch markers, "(en)" or "(en-us)", which it writes around a word it
// reads with another voice; IPA output has no other parentheses.
std::string without_language_switches(const std::string& phonemes) {
  std::string out;
  for (size_t i = 0; i < phonemes.size(); ++i) {
    if (phonemes[i] == '(') {
      const size_t close = phonemes.find(')', i);
      if (close != std::string::npos) {
        i = close;
        continue;
      }
    }
    out += phonemes[i];
  }
  return out;
}

// Words separated by one space, none at either end.
std::string single_spaced(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == ' ') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Callers hold espeak_mutex() and have selected the voice.
std::string clause_phonemes(const std::string& clause) {
  std::string phonemes;
  const void* cursor = clause.c_str();
  // espeak_TextToPhonemes translates up to its own notion of a clause end and advances the cursor,
  // setting it to null at the end of the text.
  while (cursor != nullptr) {
    const void* before = cursor;
    const char* piece = espeak_TextToPhonemes(&cursor, espeakCHARS_UTF8, espeakPHONEMES_IPA);
    if (piece != nullptr) phonemes += std::string(" ") + piece;
    if (cursor == before) {
      throw Error(ErrorKind::internal,
                  "espeak_TextToPhonemes made no progress on \"" + clause + "\"");
    }
  }
  return single_spaced(without_language_switches(phonemes));
}

}  // namespace

Phonemizer::Phonemizer(std::string espeak_data_path) {
  // espeak-ng silently falls back to its default data when the given directory is unusable, so
  // the directory is checked here; it may be espeak-ng-data itself or its parent.
  std::filesystem::path data_dir;
  if (!espeak_data_path.empty()) {
    std::error_code error;
    data_dir = espeak_data_path;
    if (!std::filesystem::exists(data_dir / "phontab", error)) data_dir /= "espeak-ng-data";
    if (!std::filesystem::exists(data_dir / "phontab", error)) {
      throw ConfigError("\"" + espeak_data_path +
                        "\" is not an espeak-ng data directory (it has no phontab); give the "
                        "espeak-ng-data directory, or leave it empty for the built-in default");
    }
  }

  std::lock_guard<std::mutex> lock(espeak_mutex());
  EspeakState& state = espeak_state();
  if (state.initialised) {
    std::error_code error;
    if (!data_dir.empty() && !std::filesystem::equivalent(data_dir, state.data_directory, error)) {
      throw ConfigError("espeak-ng is already initialised with data directory \"" +
                        state.data_directory + "\" and cannot be re-initialised with \"" +
                        espeak_data_path + "\" in the same process; use one data directory");
    }
    return;
  }
  // DONT_EXIT: without it espeak-ng calls exit() when it cannot initialise.
  const int sample_rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0,
                                            data_dir.empty() ? nullptr : data_dir.c_str(),
                                            espeakINITIALIZE_DONT_EXIT);
  const char* resolved = nullptr;
  const char* version = espeak_Info(&resolved);
  state.data_directory = resolved != nullptr ? resolved : data_dir.string();
  state.engine_version = std::string("espeak-ng ") + (version != nullptr ? version : "?");
  if (sample_rate < 0) {
    throw ConfigError("espeak-ng could not be initialised with data directory \"" +
                      state.data_directory + "\"; install espeak-ng-data or give its directory");
  }
  // Under DONT_EXIT espeak_Initialize reports unreadable data only on stderr; loading a voice is
  // the first call that fails, so fail here rather than on the first sample.
  select_voice("en");
  state.initialised = true;
  log::get("dataset")->debug("{} initialised, data at {}", state.engine_version, state.data_directory);
}

std::string Phonemizer::engine_version() const {
  std::lock_guard<std::mutex> lock(espeak_mutex());
  return espeak_state().engine_version;
}

std::string Phonemizer::data_directory() const {
  std::lock_guard<std::mutex> lock(espeak_mutex());
  return espeak_state().data_directory;
}

std::string Phonemizer::voice_for(std::string_view language) {
  static constexpr std::array<std::string_view, 5> kVoices{"en", "en-gb", "en-us", "fa", "ar"};
  std::string code;
  for (const char c : language) {
    code += c == '_' ? '-' : (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  for (const std::string_view voice : kVoices) {
    if (code == voice) return code;
  }
  const std::string primary = primary_language(language);
  for (const std::string_view voice : kVoices) {
    if (primary == voice) return primary;
  }
  return "";
}

std::string Phonemizer::phonemize(std::string_view normalized_text, std::string_view language) const {
  const std::string voice = voice_for(language);
  if (voice.empty()) {
    throw DataError("no espeak-ng voice for language \"" + std::string(language) +
                    "\" (phonemes are available for en, en-gb, en-us, fa, ar); give the sample one of "
                    "these languages or use text.tokenizer: chars");
  }
  decode_utf8(normalized_text);  // espeak would misread bytes that are not UTF-8

  // Clauses and the punctuation that ends them (see the header). ASCII punctuation never occurs
  // inside a multi-byte UTF-8 sequence, so scanning bytes is safe.
  struct Clause {
    std::string text;
    std::string punctuation;
  };
  std::vector<Clause> clauses(1);
  const std::string_view text = normalized_text;
  for (size_t i = 0; i < text.size();) {
    if (is_clause_punctuation(text[i])) {
      size_t end = i;
      while (end < text.size() && is_clause_punctuation(text[end])) ++end;
      if (end == text.size() || text[end] == ' ') {
        clauses.back().punctuation.assign(text.substr(i, end - i));
        clauses.emplace_back();
        i = end;
        continue;
      }
    }
    clauses.back().text += text[i++];
  }

  std::string phonemes;
  std::lock_guard<std::mutex> lock(espeak_mutex());
  select_voice(voice);
  for (const Clause& clause : clauses) {
    const std::string piece = clause_phonemes(clause.text) + clause.punctuation;
    if (piece.empty()) continue;
    if (!phonemes.empty()) phonemes += ' ';
    phonemes += piece;
  }
  return phonemes;
}

}  // namespace sluice::dataset
