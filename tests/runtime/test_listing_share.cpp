// The corpus listing shared by rank 0 (runtime/prep/listing_share.h), under mpirun with 1 and with
// 3 ranks: every rank gets rank 0's listing exactly, in chunks as small as a few bytes; rank 0's
// error is thrown on every rank alike; a rank 0 slower than the deadline is waited for through its
// keepalives. (A rank 0 that stops: tests/runtime/test_prep_job.cpp, with the real binary.)
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/mpi_session.h"
#include "dataset/listing_encoding.h"
#include "runtime/prep/listing_share.h"
#include "tests/support/mpi_gtest.h"

namespace sluice::runtime {
namespace {

MpiSession* session = nullptr;

// The same listing on every rank, made without the file system: what rank 0 "reads" and the
// others must end up with.
dataset::CorpusListing synthetic_listing(int rows) {
  dataset::CorpusListing listing;
  listing.root = "/corpora/vctk";
  listing.listing_file = "/corpora/vctk/txt";
  listing.format = "vctk";
  listing.recognised = "wav48_silence_trimmed/ and txt/ (VCTK 0.92)";
  listing.notes = {"a note", "another note"};
  for (int i = 0; i < rows; ++i) {
    dataset::CorpusItem item;
    const std::string speaker = "p" + std::to_string(225 + i / 7);
    item.id = speaker + "_" + std::to_string(1000 + i);
    item.source = "txt/" + speaker + "/" + item.id + ".txt";
    item.audio = "/corpora/vctk/wav48_silence_trimmed/" + speaker + "/" + item.id + "_mic1.flac";
    item.text = "Row " + std::to_string(i) + " says something \xd8\xb3\xd9\x84\xd8\xa7\xd9\x85.";
    item.speaker = speaker;
    item.language = i % 5 == 0 ? "" : "en";
    if (i % 11 == 0) {
      item.reject = dataset::RejectReason::missing_text;
      item.reject_detail = "no transcript " + item.source;
    }
    if (i % 3 == 0) item.metadata = {{"up_votes", std::to_string(i)}, {"down_votes", "0"}};
    listing.items.push_back(std::move(item));
  }
  return listing;
}

std::future<dataset::CorpusListing> ready(dataset::CorpusListing listing) {
  std::promise<dataset::CorpusListing> promise;
  promise.set_value(std::move(listing));
  return promise.get_future();
}

TEST(ListingShare, EveryRankGetsRankZerosListingInChunksOfAnySize) {
  const dataset::CorpusListing small = synthetic_listing(30), large = synthetic_listing(500);
  const size_t large_bytes = dataset::encode_listing(large).size();
  const std::vector<std::pair<const dataset::CorpusListing*, size_t>> cases = {
      {&small, 1}, {&small, 7}, {&large, 4096}, {&large, large_bytes - 1}, {&large, large_bytes},
      {&large, listing_chunk_bytes}};
  for (const auto& [expected, chunk] : cases) {
    SCOPED_TRACE(std::to_string(expected->items.size()) + " rows in chunks of " + std::to_string(chunk) + " bytes");
    std::future<dataset::CorpusListing> mine = session->rank() == 0 ? ready(*expected) : std::future<dataset::CorpusListing>();
    const dataset::CorpusListing shared = share_listing(*session, std::move(mine), 30, chunk);
    // Every field, exactly (dataset/listing_encoding.h; CorpusTest.EveryLayoutsListingComesBackFromItsEncoding).
    EXPECT_EQ(dataset::encode_listing(shared), dataset::encode_listing(*expected));
    ASSERT_EQ(shared.items.size(), expected->items.size());
    EXPECT_EQ(shared.items[11].reject, dataset::RejectReason::missing_text);
    EXPECT_EQ(shared.items[12].metadata.at("up_votes"), "12");
  }
}

TEST(ListingShare, RankZerosErrorIsThrownOnEveryRankWithItsKindAndMessage) {
  struct Case {
    std::exception_ptr thrown;
    ErrorKind kind;
    std::string message;
  };
  const std::vector<Case> cases = {
      {std::make_exception_ptr(DataError("corpus /x does not exist")), ErrorKind::data, "corpus /x does not exist"},
      {std::make_exception_ptr(ConfigError("corpus.format 'y' is not one of auto")), ErrorKind::config,
       "corpus.format 'y' is not one of auto"},
      {std::make_exception_ptr(std::runtime_error("boom")), ErrorKind::internal,
       "reading the corpus listing failed: boom"},
  };
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.message);
    std::future<dataset::CorpusListing> mine;
    if (session->rank() == 0) {
      std::promise<dataset::CorpusListing> promise;
      promise.set_exception(bad.thrown);
      mine = promise.get_future();
    }
    try {
      share_listing(*session, std::move(mine), 30);
      ADD_FAILURE() << "no error on rank " << session->rank();
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), bad.kind);
      EXPECT_EQ(std::string(error.what()), bad.message);
      EXPECT_TRUE(error.on_every_rank());  // the launcher says it once (launcher/launch.cpp end_job)
    }
  }
}

TEST(ListingShare, ARankZeroSlowerThanTheDeadlineIsWaitedForThroughItsKeepalives) {
  const dataset::CorpusListing expected = synthetic_listing(20);
  std::future<dataset::CorpusListing> mine;
  if (session->rank() == 0) {
    mine = std::async(std::launch::async, [expected] {
      std::this_thread::sleep_for(std::chrono::seconds(6));  // three times the deadline below
      return expected;
    });
  }
  const dataset::CorpusListing shared = share_listing(*session, std::move(mine), 2.0);
  EXPECT_EQ(dataset::encode_listing(shared), dataset::encode_listing(expected));
}

}  // namespace
}  // namespace sluice::runtime

int main(int argc, char** argv) {
  return sluice::test::mpi_test_main(argc, argv, [](sluice::MpiSession* s) { sluice::runtime::session = s; });
}
