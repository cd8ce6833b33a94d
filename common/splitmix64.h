#pragma once
// splitmix64 (Steele, Lea, Flood 2014): one step of a counter-based generator. sluice derives
// every seed from (train.seed, epoch, rank, step, sample) with it, so that a seed is a pure
// function of those numbers on every rank and in every resumed run.
#include <cstdint>

namespace sluice {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace sluice
