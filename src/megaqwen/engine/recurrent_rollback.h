// RecurrentRollback<State>: truncate() for an engine whose cache holds recurrent states (Qwen3.5's
// DeltaNet layers: S and the conv window) besides a KV cache. The KV cache is indexed by position, so
// cutting it is free; a recurrent state summarizes every token so far and cannot be cut. Instead the
// engine keeps snapshots of its states where a rollback is likely to land (the ends of prefill calls,
// which Generator's prefix reuse returns to, and one token before the end of a long one) and the token
// ids it has seen; rolling back to n restores
// the latest snapshot at or before n and replays the tokens from there to n (exact: the same
// computation again). At most kMaxSnapshots are kept, the oldest dropped first; without one, replay
// starts from position 0. State is the engine's copy of its states (host vectors, device buffers).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "megaqwen/util/error.h"

namespace megaqwen {

// Snapshots kept per sequence (~20 MiB each at Qwen3.5-0.8B's shapes); engines count them in their
// memory plans.
constexpr size_t kMaxStateSnapshots = 8;

// A prefill call of more tokens than this runs its last token separately and leaves a snapshot one
// token before its end too: the same prompt sent again (a regenerated reply, a rerun from a state
// file) comes back to there, because the generator always prefills a prompt's last token anew for
// its logits. Shorter calls skip it: replaying up to this many tokens costs about what the extra
// pass over the weights would.
constexpr size_t kSnapshotBeforeLastAbove = 16;

// A rollback's token ids and snapshots as an engine's save_state() keeps them (RecurrentRollback::save).
template <class State>
struct SavedRollback {
  std::vector<int32_t> tokens;
  std::vector<std::pair<int, State>> snapshots;
};

template <class State>
class RecurrentRollback {
 public:
  static constexpr size_t kMaxSnapshots = kMaxStateSnapshots;

  explicit RecurrentRollback(int context = 0) : tokens_(size_t(context), -1) {}

  // The ids now at positions position.. (a forward pass, or a replay writing the same ids again).
  void record(int position, std::span<const int32_t> tokens) {
    std::copy(tokens.begin(), tokens.end(), tokens_.begin() + position);
  }
  // Benchmark noise replaced the cache: no position holds a token, no snapshot describes a sequence.
  void forget_all() {
    std::fill(tokens_.begin(), tokens_.end(), -1);
    snapshots_.clear();
  }

  // A snapshot of the states at `position`, taken by take() unless one is stored there already.
  void remember(int position, const std::function<State()>& take) {
    auto at = std::lower_bound(snapshots_.begin(), snapshots_.end(), position,
                               [](const Snapshot& s, int p) { return s.position < p; });
    if (at != snapshots_.end() && at->position == position) return;
    snapshots_.insert(at, Snapshot{position, take()});
    if (snapshots_.size() > kMaxSnapshots) snapshots_.erase(snapshots_.begin());
  }

  // Brings the states back to position n (< the engine's position): restore() gets the latest
  // snapshot at or before n (null: start from zeros at position 0), then replay(start, ids) must set
  // the engine to position `start` and run the ids from there to n (it may be given none). Fails,
  // leaving everything unchanged, when a position to replay holds benchmark noise.
  void roll_back(int n, const std::function<void(const State*)>& restore,
                 const std::function<void(int, std::span<const int32_t>)>& replay) {
    const Snapshot* from = nullptr;
    for (const Snapshot& s : snapshots_)
      if (s.position <= n) from = &s;
    const int start = from ? from->position : 0;
    for (int p = start; p < n; ++p)
      if (tokens_[size_t(p)] < 0)
        fail("cannot roll the cache back to {} tokens: position {} holds benchmark noise, not a token", n, p);
    restore(from ? &from->state : nullptr);
    std::erase_if(snapshots_, [n](const Snapshot& s) { return s.position > n; });  // tokens that are gone
    const std::vector<int32_t> ids(tokens_.begin() + start, tokens_.begin() + n);
    replayed_ += n - start;
    replay(start, ids);
  }

  // What an engine's save_state() keeps of the rollback: the ids at 0..position and copies of the
  // snapshots (made by `copy`). load() puts such a set back, so that after restoring a saved sequence
  // a rollback within it still lands on a snapshot.
  SavedRollback<State> save(int position, const std::function<State(const State&)>& copy) const {
    SavedRollback<State> out{std::vector<int32_t>(tokens_.begin(), tokens_.begin() + position), {}};
    for (const Snapshot& s : snapshots_)
      if (s.position <= position) out.snapshots.emplace_back(s.position, copy(s.state));
    return out;
  }
  // The rollback of a restored sequence: its ids and snapshots (copies the engine made of a saved
  // sequence's, so the saved one stays intact for later restores).
  void load(SavedRollback<State> saved) {
    forget_all();
    record(0, saved.tokens);
    for (auto& [position, state] : saved.snapshots) snapshots_.push_back(Snapshot{position, std::move(state)});
  }

  // Positions with a stored snapshot, ascending (tests and stats).
  std::vector<int> snapshot_positions() const {
    std::vector<int> out;
    for (const Snapshot& s : snapshots_) out.push_back(s.position);
    return out;
  }
  // Tokens replayed since construction (a rollback that lands on a snapshot replays nothing).
  int64_t replayed_tokens() const { return replayed_; }

 private:
  struct Snapshot {
    int position = 0;
    State state;
  };
  std::vector<int32_t> tokens_;      // [context]: the ids in the cache; -1 = benchmark noise
  std::vector<Snapshot> snapshots_;  // ascending position
  int64_t replayed_ = 0;
};

}  // namespace megaqwen
