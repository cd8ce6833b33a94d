#pragma once
// IPA phonemes from normalised text (text_normalizer.h) through libespeak-ng, for the "phonemes"
// tokenizer (vocabulary ipa-v1).
//
// Threads: espeak-ng keeps its state (voice, dictionaries, buffers) in process-wide globals and is
// not thread-safe. Every call into it, from every Phonemizer, runs under one process-wide mutex,
// so worker threads may share or each own a Phonemizer; calls simply take turns. espeak-ng is
// initialised once per process, by the first Phonemizer constructed, and never terminated; it
// cannot be re-initialised with another data directory, so a later Phonemizer naming a different
// one throws ConfigError.
//
// Output: clauses are split at the punctuation , . ! ? ; : (a run of them, followed by a space or
// the end), each clause goes through espeak_TextToPhonemes (looped until espeak has consumed all
// of it), and the punctuation is written back after the clause's phonemes, since espeak drops it
// and a TTS model needs the pauses: "hello, world." -> "həlˈəʊ, wˈɜːld." (en). Words within a
// clause are separated by one space; espeak's language-switch markers ("(en)...(fa)" around a
// foreign word) are removed, the foreign word's phonemes kept. Other punctuation (quotes, hyphens,
// brackets) is dropped, as espeak does.
//
// Voices: "en" -> espeak-ng "en" (British), "en-gb", "en-us", "fa", "ar"; another code whose
// primary subtag is one of these uses that one ("fa-IR" -> "fa", "en-AU" -> "en").
#include <string>
#include <string_view>

namespace sluice::dataset {

class Phonemizer {
 public:
  // espeak_data_path: the espeak-ng-data directory (or its parent); empty = the library's built-in
  // default. Throws ConfigError when it is not a data directory or espeak-ng cannot initialise.
  explicit Phonemizer(std::string espeak_data_path = "");

  // Deterministic for a given espeak-ng build and data. Empty text gives "". Throws DataError
  // naming the language when no voice is mapped for it, and when the text is not valid UTF-8.
  std::string phonemize(std::string_view normalized_text, std::string_view language) const;

  // What produced the phonemes, for the cache fingerprint and manifest: the same text gives other
  // phonemes under another espeak-ng release or data. "espeak-ng 1.51" and the resolved
  // espeak-ng-data directory.
  std::string engine_version() const;
  std::string data_directory() const;

  // The espeak-ng voice used for `language`, or "" when none is mapped.
  static std::string voice_for(std::string_view language);
};

}  // namespace sluice::dataset
