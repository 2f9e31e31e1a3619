// The race checker (race_check.h): the simt::Observer that holds the model, and the ThreadSanitizer
// instrumentation hooks that feed it. Compiled without -fsanitize=thread (the hooks must not call
// themselves).
#include "simt/race_check.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "simt/simt.h"

namespace simt::race {
namespace {

// What one block knows of another block's accesses: every access in an interval before `gen`, and
// those of `thread` in interval `gen` (the ones before its release; the release ends the interval).
struct Know {
  uint32_t gen = 0;
  int32_t thread = -1;
};
Know join(Know a, Know b) {
  if (a.gen != b.gen) return a.gen > b.gen ? a : b;
  // Two releases never share an interval (each one ends it), so equal gens name the same thread;
  // otherwise keep only what both imply.
  return a.thread == b.thread ? a : Know{a.gen, -1};
}
using Clock = std::vector<Know>;  // by block; blocks past the end: nothing known
void join_into(Clock& a, const Clock& b) {
  if (a.size() < b.size()) a.resize(b.size());
  for (size_t i = 0; i < b.size(); ++i) a[i] = join(a[i], b[i]);
}

constexpr int32_t kSeveralThreads = -2;  // a read stamp for reads of several threads in one interval

// One access: where, by whom, in which interval of its block.
struct Stamp {
  const void* pc = nullptr;
  uint32_t gen = 0;
  int32_t block = -1;  // -1: none
  int32_t thread = -1;
  bool atomic = false;
};

// Shadow of 2 bytes of memory: the last write, and the latest read of each block since it.
struct Cell {
  Stamp write;
  uint32_t reads = 0;  // 1 + index into Checker::reads_, 0: none
  Stamp read_only;     // the latest __ldg of these bytes in the launch (block -1: none)
};
constexpr uintptr_t kGranule = 4, kPageBytes = 4096, kCellsPerPage = kPageBytes / kGranule;

// A thread's own view beyond its block's: what it acquired since the block's last barrier, what its
// relaxed loads read (an acquire fence takes it), and what its last release fence published (its
// later relaxed atomic writes carry it).
struct ThreadView {
  Clock acquired, relaxed_seen, fence_release;
  bool has_fence_release = false;
};

struct Block {
  uint32_t gen = 1;  // 0 is "nothing known" in a Know
  Clock known;
  std::vector<std::unique_ptr<ThreadView>> threads;  // by thread, made on a thread's first atomic or fence
  ThreadView* view(int t, int n) {
    if (threads.empty()) threads.resize(size_t(n));
    auto& v = threads[size_t(t)];
    if (!v) v = std::make_unique<ThreadView>();
    return v.get();
  }
  const ThreadView* find(int t) const { return threads.empty() ? nullptr : threads[size_t(t)].get(); }
};

struct Race {
  Stamp first, second;
  bool first_write = false, second_write = false;
  uintptr_t addr = 0;
  size_t count = 0;
  const char* read_only = nullptr;  // not a race but a read-only-path read of memory written in the launch
};

std::string hex(uintptr_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%zx", size_t(v));
  return b;
}

// "file:line in file:line ..." for a return address (inlined frames, innermost first), through addr2line.
std::string where(const void* pc) {
  Dl_info info{};
  if (!pc || !dladdr(pc, &info)) return hex(uintptr_t(pc));
  std::string file = info.dli_fname ? info.dli_fname : "";
  if (file.empty() || access(file.c_str(), R_OK) != 0) {
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    file = n > 0 ? std::string(exe, size_t(n)) : "";
  }
  // A return address: the call is the byte before it.
  const uintptr_t offset = uintptr_t(pc) - uintptr_t(info.dli_fbase) - 1;
  const std::string fallback = file + "+" + hex(offset);
  const std::string cmd = "addr2line -f -C -i -e '" + file + "' " + hex(offset) + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return fallback;
  std::vector<std::string> lines;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    lines.push_back(s);
  }
  pclose(f);
  if (lines.size() < 2 || lines[1].rfind("??", 0) == 0) return fallback;
  // addr2line -i: pairs of (function, file:line), innermost first; the locations say enough. The
  // emulator's own frames (simt.h: __ldcg and the like) are left out.
  std::string out;
  int shown = 0;
  for (size_t i = 1; i < lines.size() && shown < 3; i += 2) {
    std::string loc = lines[i];
    if (const size_t slash = loc.rfind('/'); slash != std::string::npos) loc = loc.substr(slash + 1);
    if (const size_t paren = loc.find(" ("); paren != std::string::npos) loc = loc.substr(0, paren);
    if (loc.rfind("simt.h:", 0) == 0 && i + 2 < lines.size()) continue;
    out += (shown++ ? " in " : "") + loc;
  }
  return out;
}

class Checker final : public Observer {
 public:
  Checker() { set_observer(this); }

  void launch_begin(uint64_t blocks, int threads_per_block, bool coresident) override {
    reset();
    active_ = coresident;
    if (!active_) return;
    threads_per_block_ = threads_per_block;
    blocks_.clear();
    blocks_.resize(size_t(blocks));
    ++totals_.launches;
  }

  std::string launch_end() override {
    active_ = false;
    std::string text;
    if (!races_.empty()) {
      size_t all = 0;
      for (const Race& r : races_) all += r.count;
      all += unlisted_;
      totals_.races += races_.size();
      text = "simt race check: " + std::to_string(all) + " access(es) of global memory conflict: with another " +
             "block's without a happens-before order, or with a read-only-path read (" + std::to_string(races_.size()) +
             " pair(s) of sites" + (unlisted_ ? ", more not listed" : "") + "):";
      for (const Race& r : races_) {
        auto side = [](const Stamp& s, bool write) {
          return std::string(s.atomic ? "atomic " : "") + (write ? "write" : "read") + " by block " +
                 std::to_string(s.block) + " thread " +
                 (s.thread == kSeveralThreads ? std::string("(several)") : std::to_string(s.thread)) + " (interval " +
                 std::to_string(s.gen) + ") at " + where(s.pc);
        };
        const std::string relation =
            r.read_only ? std::string("\n    touches memory the launch also reads through ") + r.read_only +
                              " (which assumes it never changes during the kernel): the earlier "
                        : std::string("\n    is unordered with the earlier ");
        text += "\n  " + side(r.second, r.second_write) + relation + side(r.first, r.first_write) + "\n    at " +
                hex(r.addr) + ", " + std::to_string(r.count) + " time(s)";
      }
    }
    last_report_ = text;
    reset();
    return throw_on_race_ ? text : std::string();
  }

  void barrier_completed(int b) override {
    if (!active_) return;
    Block& blk = blocks_[size_t(b)];
    for (auto& t : blk.threads)
      if (t && !t->acquired.empty()) {
        join_into(blk.known, t->acquired);
        t->acquired.clear();
      }
    ++blk.gen;
  }

  void atomic(const void* p, size_t bytes, AtomicKind kind, MemoryOrder order, const void* pc) override {
    const detail::ThreadRegs* r = detail::g_regs;
    if (!active_ || private_to_block(*r, p)) return;
    const bool acquire = order == MemoryOrder::Acquire || order == MemoryOrder::AcqRel || order == MemoryOrder::SeqCst;
    const bool release = order == MemoryOrder::Release || order == MemoryOrder::AcqRel || order == MemoryOrder::SeqCst;
    // The access itself first: a release's own write belongs to the interval it publishes.
    access(*r, p, bytes, kind != AtomicKind::Load, true, pc);
    Block& blk = blocks_[size_t(r->block)];
    ThreadView& me = *blk.view(r->linear, threads_per_block_);
    const uintptr_t key = uintptr_t(p);
    if (kind != AtomicKind::Store) {
      // Reads the location's history: all releases so far (this emulator reads the latest value).
      if (auto it = sync_.find(key); it != sync_.end()) join_into(acquire ? me.acquired : me.relaxed_seen, it->second);
    }
    if (kind == AtomicKind::Load) return;
    Clock published;
    const bool publishes = release || me.has_fence_release;
    if (release)
      published = publish(blk, *r);
    else if (me.has_fence_release)
      published = me.fence_release;
    if (kind == AtomicKind::Store) {
      // A store starts a new history: earlier releases are not carried past it.
      if (publishes)
        sync_[key] = std::move(published);
      else
        sync_.erase(key);
    } else if (publishes) {
      join_into(sync_[key], published);  // an RMW continues the release sequences before it
    }
  }

  void fence(MemoryOrder order) override {
    const detail::ThreadRegs* r = detail::g_regs;
    if (!active_) return;
    Block& blk = blocks_[size_t(r->block)];
    ThreadView& me = *blk.view(r->linear, threads_per_block_);
    if (order != MemoryOrder::Release) join_into(me.acquired, me.relaxed_seen);  // acquire side
    if (order != MemoryOrder::Acquire) {
      me.fence_release = publish(blk, *r);
      me.has_fence_release = true;
    }
  }

  // ld.global.nc and the bulk copies' async proxy assume memory that stays unchanged while the kernel
  // runs: a write to it anywhere in the launch, before or after, is reported (no ordering makes it
  // safe without a proxy fence or a coherent load). Bulk copies read the weights, megabytes per
  // launch: they look at existing shadow only and leave no mark.
  void read_only(const void* p, size_t bytes, const char* how, const void* pc) override {
    const detail::ThreadRegs* r = detail::g_regs;
    if (!active_ || bytes == 0 || private_to_block(*r, p)) return;
    const bool bulk = how[0] == 'c';
    const Stamp now{pc, blocks_[size_t(r->block)].gen, r->block, r->linear, false};
    const uintptr_t lo = uintptr_t(p) / kGranule, hi = (uintptr_t(p) + bytes - 1) / kGranule;
    for (uintptr_t g = lo; g <= hi; ++g) {
      Cell* c = bulk ? existing_cell(g) : &cell(g);
      if (!c) {
        g = (g / kCellsPerPage + 1) * kCellsPerPage - 1;  // no shadow page: nothing written there
        continue;
      }
      if (c->write.block >= 0) found(c->write, true, now, false, g * kGranule, how);
      if (!bulk) c->read_only = now;
    }
  }

  // A plain access (from the instrumentation hooks).
  void plain(const void* p, size_t bytes, bool write, const void* pc) {
    const detail::ThreadRegs* r = detail::g_regs;
    if (!r || !active_ || private_to_block(*r, p)) return;
    access(*r, p, bytes, write, false, pc);
  }

  Totals totals() const { return totals_; }
  void set_throw(bool on) { throw_on_race_ = on; }
  const std::string& last_report() const { return last_report_; }

 private:
  static bool private_to_block(const detail::ThreadRegs& r, const void* p) {
    const char* c = static_cast<const char*>(p);
    return (c >= r.stack_lo && c < r.stack_hi) || (c >= r.shared_lo && c < r.shared_hi);
  }

  // What thread t of the block publishes with a release: what the block knows, what t acquired, and
  // the block's accesses before the current interval plus t's in it. The interval ends.
  Clock publish(Block& blk, const detail::ThreadRegs& r) {
    Clock v = blk.known;
    if (const ThreadView* t = blk.find(r.linear)) join_into(v, t->acquired);
    if (v.size() <= size_t(r.block)) v.resize(size_t(r.block) + 1);
    v[size_t(r.block)] = Know{blk.gen, r.linear};
    ++blk.gen;
    return v;
  }

  Cell* existing_cell(uintptr_t granule) {
    const auto it = pages_.find(granule / kCellsPerPage);
    return it == pages_.end() ? nullptr : &it->second[granule % kCellsPerPage];
  }

  Cell& cell(uintptr_t granule) {
    // A small direct-mapped cache in front of the page table: device code alternates between a few
    // buffers (its inputs, outputs, the kernel's parameters).
    const uintptr_t page = granule / kCellsPerPage;
    PageSlot& slot = page_cache_[page % kPageCacheSlots];
    if (slot.page != page || !slot.cells) {
      auto& cells = pages_[page];
      if (!cells) cells = std::make_unique<Cell[]>(kCellsPerPage);
      slot = PageSlot{page, cells.get()};
    }
    return slot.cells[granule % kCellsPerPage];
  }

  void access(const detail::ThreadRegs& r, const void* p, size_t bytes, bool write, bool atomic, const void* pc) {
    if (bytes == 0) return;
    ++totals_.checked_accesses;
    const Block& blk = blocks_[size_t(r.block)];
    const ThreadView* tv = blk.find(r.linear);
    const Clock* acquired = tv && !tv->acquired.empty() ? &tv->acquired : nullptr;
    auto ordered = [&](const Stamp& s) {
      if (s.block < 0 || s.block == r.block || (atomic && s.atomic)) return true;
      Know k = size_t(s.block) < blk.known.size() ? blk.known[size_t(s.block)] : Know{};
      if (acquired && size_t(s.block) < acquired->size()) k = join(k, (*acquired)[size_t(s.block)]);
      return s.gen < k.gen || (s.gen == k.gen && s.thread == k.thread);
    };
    const Stamp now{pc, blk.gen, r.block, r.linear, atomic};
    const uintptr_t lo = uintptr_t(p) / kGranule, hi = (uintptr_t(p) + bytes - 1) / kGranule;
    for (uintptr_t g = lo; g <= hi; ++g) {
      Cell& c = cell(g);
      if (!ordered(c.write)) found(c.write, true, now, write, g * kGranule);
      if (write) {
        if (c.reads) {
          for (const Stamp& s : reads_[c.reads - 1])
            if (s.block >= 0 && !ordered(s)) found(s, false, now, true, g * kGranule);
          reads_[c.reads - 1].clear();
          free_reads_.push_back(c.reads - 1);
          c.reads = 0;
        }
        if (c.read_only.block >= 0) found(c.read_only, false, now, true, g * kGranule, "__ldg");
        c.write = now;
      } else {
        add_read(c, now);
      }
    }
  }

  // A cell's reads since its last write: a short list of (block, stamp), or, once more than
  // kSparseReads blocks have read it (the kernel's parameters, the activations every CTA reads), one
  // slot per block, so a read costs the same on 132 CTAs as on 4.
  void add_read(Cell& c, const Stamp& now) {
    if (!c.reads) {
      if (free_reads_.empty()) {
        reads_.emplace_back();
        c.reads = uint32_t(reads_.size());
      } else {
        c.reads = free_reads_.back() + 1;
        free_reads_.pop_back();
      }
    }
    std::vector<Stamp>& list = reads_[c.reads - 1];
    auto merge = [&](Stamp& s) {
      // Knowing a block's later read implies knowing its earlier ones: one stamp per block.
      const bool several = s.block == now.block && s.gen == now.gen && s.thread != now.thread;
      const bool atomic = s.block < 0 ? now.atomic : s.atomic && now.atomic;  // a plain read keeps it plain
      s = now;
      s.atomic = atomic;
      if (several) s.thread = kSeveralThreads;
    };
    if (list.size() == blocks_.size() && list.size() > kSparseReads) {  // dense: slot = block
      merge(list[size_t(now.block)]);
      return;
    }
    for (Stamp& s : list)
      if (s.block == now.block) {
        merge(s);
        return;
      }
    if (list.size() < kSparseReads || blocks_.size() <= kSparseReads) {
      list.push_back(now);
      return;
    }
    std::vector<Stamp> dense(blocks_.size());
    for (const Stamp& s : list) dense[size_t(s.block)] = s;
    merge(dense[size_t(now.block)]);
    list.swap(dense);
  }

  void found(const Stamp& first, bool first_write, const Stamp& second, bool second_write, uintptr_t addr,
             const char* read_only = nullptr) {
    for (Race& r : races_)
      if (r.first.pc == first.pc && r.second.pc == second.pc && r.first_write == first_write &&
          r.second_write == second_write && r.read_only == read_only) {
        ++r.count;
        return;
      }
    if (races_.size() < kMaxSites)
      races_.push_back(Race{first, second, first_write, second_write, addr, 1, read_only});
    else
      ++unlisted_;
  }

  void reset() {
    pages_.clear();
    for (PageSlot& slot : page_cache_) slot = PageSlot{};
    reads_.clear();
    free_reads_.clear();
    sync_.clear();
    blocks_.clear();
    races_.clear();
    unlisted_ = 0;
  }

  static constexpr size_t kMaxSites = 16;
  static constexpr size_t kSparseReads = 8;
  bool active_ = false;
  bool throw_on_race_ = true;
  int threads_per_block_ = 0;
  std::vector<Block> blocks_;
  std::unordered_map<uintptr_t, std::unique_ptr<Cell[]>> pages_;
  struct PageSlot {
    uintptr_t page = 0;
    Cell* cells = nullptr;
  };
  static constexpr size_t kPageCacheSlots = 64;
  PageSlot page_cache_[kPageCacheSlots];
  std::vector<std::vector<Stamp>> reads_;
  std::vector<uint32_t> free_reads_;
  std::unordered_map<uintptr_t, Clock> sync_;  // per atomic location: the releases its value carries
  std::vector<Race> races_;
  size_t unlisted_ = 0;  // conflicts at sites beyond the first kMaxSites pairs
  std::string last_report_;
  Totals totals_;
};

Checker& checker() {
  static Checker c;
  return c;
}
// Installed when the binary starts, before any test launches.
[[maybe_unused]] const bool g_installed = (checker(), true);

}  // namespace

Totals totals() { return checker().totals(); }
void set_throw_on_race(bool on) { checker().set_throw(on); }
const std::string& last_report() { return checker().last_report(); }

}  // namespace simt::race

// ---- ThreadSanitizer's instrumentation interface (what GCC's -fsanitize=thread calls) ----
// Plain accesses go to the checker; the atomics of host code compiled with the instrumentation are
// performed here (sequentially consistent, which every requested order allows); function entry and
// exit are not tracked.
namespace {
inline void plain_access(void* p, size_t n, bool write, const void* pc) {
  if (simt::detail::g_regs) simt::race::checker().plain(p, n, write, pc);
}
}  // namespace

extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_read_range(void* p, unsigned long n) { plain_access(p, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void* p, unsigned long n) { plain_access(p, n, true, __builtin_return_address(0)); }
#define SIMT_TSAN_ACCESS(N)                                                                                   \
  void __tsan_read##N(void* p) { plain_access(p, N, false, __builtin_return_address(0)); }                    \
  void __tsan_write##N(void* p) { plain_access(p, N, true, __builtin_return_address(0)); }                    \
  void __tsan_unaligned_read##N(void* p) { plain_access(p, N, false, __builtin_return_address(0)); }          \
  void __tsan_unaligned_write##N(void* p) { plain_access(p, N, true, __builtin_return_address(0)); }          \
  void __tsan_volatile_read##N(void* p) { plain_access(p, N, false, __builtin_return_address(0)); }           \
  void __tsan_volatile_write##N(void* p) { plain_access(p, N, true, __builtin_return_address(0)); }           \
  void __tsan_unaligned_volatile_read##N(void* p) { plain_access(p, N, false, __builtin_return_address(0)); } \
  void __tsan_unaligned_volatile_write##N(void* p) { plain_access(p, N, true, __builtin_return_address(0)); }
SIMT_TSAN_ACCESS(1)
SIMT_TSAN_ACCESS(2)
SIMT_TSAN_ACCESS(4)
SIMT_TSAN_ACCESS(8)
SIMT_TSAN_ACCESS(16)
#undef SIMT_TSAN_ACCESS

#define SIMT_TSAN_ATOMIC(N, T)                                                                                     \
  T __tsan_atomic##N##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }             \
  void __tsan_atomic##N##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }             \
  T __tsan_atomic##N##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }     \
  T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) { return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
  int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                             \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                        \
  }                                                                                                                \
  int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                               \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                         \
  }                                                                                                                \
  T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                                   \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                              \
    return c;                                                                                                      \
  }
SIMT_TSAN_ATOMIC(8, char)
SIMT_TSAN_ATOMIC(16, short)
SIMT_TSAN_ATOMIC(32, int)
SIMT_TSAN_ATOMIC(64, long)
#undef SIMT_TSAN_ATOMIC
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}
