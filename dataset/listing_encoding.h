#pragma once
// A corpus listing (dataset/corpus.h) as bytes, and back, exactly: so that one rank reads a corpus
// whose listing is many files (VCTK: a transcript per utterance) and the others take its listing
// instead of opening those files again (runtime/prep/listing_share.h).
//
// Format (version 1). Integers are LEB128 varints. A string field is written against the previous
// value of the same field (the previous item's audio path, source, speaker, ...): the length of the
// prefix it shares with it, then the rest (length, bytes). Items' paths share their folders, VCTK's
// sources and audio paths their speaker folder, a corpus's speakers and languages repeat: those
// cost a few bytes an item, while a transcript, shared with nothing, costs two bytes over its text.
//   "SLST" 1
//   root listing_file format recognised        (strings)
//   notes: count, then each                    (strings, each against the previous note)
//   items: count, then each:
//     source id audio text speaker language    (strings, each against the previous item's)
//     reject: 0 = none, else 1 + the RejectReason; when set, reject_detail (string)
//     metadata: count, then key value per entry (strings, against the previous item's entry at the
//               same place)
// Nothing is left out: decode_listing(encode_listing(x)) equals x field by field.
#include <string>

#include "dataset/corpus.h"

namespace sluice::dataset {

std::string encode_listing(const CorpusListing& listing);

// The listing `bytes` encode. Throws Error (ErrorKind::internal) naming what is wrong when they are
// not one encode_listing wrote (cut short, another version, a reject reason it does not know).
CorpusListing decode_listing(const std::string& bytes);

}  // namespace sluice::dataset
