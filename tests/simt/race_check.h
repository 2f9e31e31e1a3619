// race_check: a happens-before race detector for device code run in the simt emulator, so CPU CI can
// find the memory-ordering bugs that the emulator's sequentially consistent execution hides and that
// no GPU tool checks (compute-sanitizer's racecheck sees shared memory only, not one CTA's global
// writes read by another).
//
// How. The code under test is compiled with -fsanitize=thread but linked without ThreadSanitizer's
// runtime: GCC's instrumentation calls __tsan_read4(p), __tsan_write16(p), ... before every memory
// access, and race_check.cpp defines those hooks. Accesses made from a kernel's threads to memory
// outside the thread's stack and its block's shared memory (that is, global memory) are checked; host
// code is not. The emulator tells the checker (simt::Observer) of every launch, completed block
// barrier, atomic with its memory order, and fence.
//
// The model (the PTX memory model as far as CTAs talking through global memory need it). Each block
// counts barrier intervals: the interval advances at every completed __syncthreads and at every
// release the block performs. A release by thread t of block b publishes what b knows: every access of
// b before its current interval, t's own accesses in it, and everything b has acquired before. An
// acquire (ld.acquire, an acq_rel RMW, or a relaxed load followed by an acquire fence) gives the
// releases of that location's history to the acquiring thread, and to the whole block at its next
// __syncthreads. Two accesses to the same bytes from different blocks, at least one a write and not
// both atomic, race unless the later one's block (or thread) knows the earlier. So a missing
// __syncthreads before a signal, a relaxed add where a release is needed, a relaxed poll without its
// fence, a wait whose block reads before the barrier that shares the acquire, or a buffer rewritten
// while another block may still read it, is reported on every run, whatever order the emulator ran
// the threads in. Accesses within a block are not judged (barriers order them; racecheck covers the
// rest on the GPU). Granule: 4 bytes, so two blocks writing the two halves of one word would be
// reported (the megakernel's slices are whole rows; a finer granule costs twice the time).
//
// Which launches: co-resident ones (simt::Options::coresident), the persistent kernels whose CTAs
// wait on each other. A grid of independent blocks (the per-operator kernels, run one block after
// another) is left alone: its blocks do not talk, and its __ldg-heavy code is not instrumented.
//
// Use: link race_check.cpp (and simt.cpp) into a binary whose device code is compiled with
// -fsanitize=thread; the checker is installed when the binary starts, and a launch with a race throws
// simt::Error with a report: the two accesses, their blocks, threads and source lines (addr2line).
#pragma once

#include <cstddef>
#include <string>

namespace simt::race {

struct Totals {
  size_t launches = 0;          // launches checked since the binary started
  size_t checked_accesses = 0;  // global-memory accesses judged
  size_t races = 0;             // conflicting pairs found (each reported pair of sites counted once per launch)
};
Totals totals();

// true (the default): a launch with a race throws. false: it only counts and keeps the report
// (last_report), for tests that look at what was found.
void set_throw_on_race(bool on);
const std::string& last_report();

}  // namespace simt::race
