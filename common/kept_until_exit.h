#pragma once
// Memory handed to a non-blocking MPI collective that an error left in flight. MPI forbids
// freeing or cancelling such a request, so the collective may still read and write its buffers
// (and use its communicator) until the process ends; the ending process therefore keeps them
// instead of freeing them (model/gradient_reducer.h, GradientReducer::in_flight). Only for a
// process that is about to end: what is kept is never freed.
#include <type_traits>
#include <utility>

namespace sluice {

template <typename T>
void keep_until_exit(T&& value) {
  new std::decay_t<T>(std::forward<T>(value));  // NOLINT: deliberately never deleted
}

}  // namespace sluice
