#pragma once
// Step 1 of the prep protocol (runtime/prep/prep_job.h): the corpus listing, read by rank 0 alone
// and shared with every other rank.
//
// Why: a corpus whose listing is many files (VCTK: a transcript per utterance, 44k of them;
// LibriTTS: two per utterance) cost every rank those opens and stats, so 64 ranks on a shared file
// system made 64 times the metadata operations of one. Now rank 0 makes them (on a thread started
// before MPI, start_listing) and the others take its listing as bytes (dataset/listing_encoding.h).
//
// Protocol, on the world communicator, non-blocking collectives only (MPI_Ibcast), polled:
//  - a header from rank 0: {state, bytes}. While rank 0 still reads, it broadcasts {reading, 0}
//    every runtime.timeout_s / 4 (when the previous one has left it): the keepalive. Then
//    {listing, size} or {error, size};
//  - then the payload in chunks of at most chunk_bytes (1 GiB: an MPI count is an int): the
//    encoded listing, or the error (its kind and message).
// Every wait has the deadline runtime.timeout_s: a rank that hears nothing from rank 0 (no
// keepalive, no chunk) for that long throws TransportError naming rank 0 and its host (dead,
// stopped or cut off), not a hang; rank 0 that cannot hand the bytes on for that long names the
// broadcast it was sending.
// The listing's errors (no such corpus, a bad header line, an unknown format) are rank 0's, sent
// to every rank and thrown there as the same Error (kind and message) marked on_every_rank: the
// launcher says it once, and every rank exits with the code one rank alone would have.
#include <cstddef>
#include <future>

#include "common/mpi_session.h"
#include "dataset/corpus.h"

namespace sluice::runtime {

constexpr size_t listing_chunk_bytes = size_t{1} << 30;

// Every rank's copy of rank 0's listing. On rank 0, `being_read` is the listing started before MPI
// (start_listing); the other ranks pass whatever they have (an empty future when they started no
// read) and do not wait for it. Throws rank 0's listing error on every rank (see above), or
// TransportError on a deadline.
dataset::CorpusListing share_listing(const MpiSession& session, std::future<dataset::CorpusListing> being_read,
                                     double timeout_s, size_t chunk_bytes = listing_chunk_bytes);

}  // namespace sluice::runtime
