// simt runtime: fibers, the cooperative scheduler, block barriers, warp collectives, diagnostics.
// See simt.h for the model.
#include "simt.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif
#ifndef SIMT_ASAN
#define SIMT_ASAN 0
#endif

// x86-64 has a hand-written context switch (callee-saved registers, MXCSR and the x87 control word:
// a few nanoseconds); other targets, or -DSIMT_USE_UCONTEXT=1, use ucontext (a system call per switch).
#if !defined(SIMT_USE_UCONTEXT)
#if defined(__x86_64__) && !defined(_WIN32)
#define SIMT_USE_UCONTEXT 0
#else
#define SIMT_USE_UCONTEXT 1
#endif
#endif

#if SIMT_USE_UCONTEXT
#include <ucontext.h>
#endif
#if SIMT_ASAN
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !SIMT_USE_UCONTEXT
// simt_switch_context(save, load): pushes the callee-saved state on the current stack, stores the
// stack pointer to *save, switches to the stack `load` and pops the state saved there.
// simt_fiber_trampoline: where a new fiber's first switch returns to; calls r13(r12) (never returns).
extern "C" void simt_switch_context(void** save, void* load);
extern "C" void simt_fiber_trampoline();
asm(R"(
  .text
  .globl simt_switch_context
  .type simt_switch_context, @function
  .p2align 4
simt_switch_context:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size simt_switch_context, .-simt_switch_context

  .globl simt_fiber_trampoline
  .type simt_fiber_trampoline, @function
  .p2align 4
simt_fiber_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size simt_fiber_trampoline, .-simt_fiber_trampoline
)");
#endif

namespace simt::detail {

thread_local constinit const ThreadRegs* g_regs = nullptr;
Observer* g_observer = nullptr;

namespace {

// A thrown fault unwinds the faulting fiber to its entry (not a std::exception: device code that
// catches those does not swallow it).
struct Fault {
  std::string message;
};

enum class State : uint8_t { Ready, Running, Barrier, Warp, Done };

struct Context {
#if SIMT_USE_UCONTEXT
  ucontext_t uc;
#else
  void* sp = nullptr;
#endif
#if SIMT_ASAN
  void* fake_stack = nullptr;
  const void* stack_bottom = nullptr;
  size_t stack_size = 0;
#endif
};

struct Fiber {
  Context ctx;
  ThreadRegs regs;
  State state = State::Ready;
  int slot = 0;                // the resident block it belongs to (Runtime::blocks)
  bool polling = false;        // Ready because it yielded in a poll (simt::poll), not because it was woken
  const char* what = nullptr;  // the synchronization point it waits at
  Site where;
  char* stack_lo = nullptr;
  size_t stack_size = 0;
};

struct WarpSlot {
  int arrived = 0;
  unsigned gen = 0;
  const char* what = nullptr;
  Site where;
  int first_lane = 0;
  uint64_t vals[2][32];  // by generation parity: a lane reads generation g while others fill g + 1
};

// An mbarrier (simt::mbarrier_*): the phase in progress, arrivals still expected in it, transaction
// bytes still expected.
struct MBarrier {
  uint32_t phase = 0;
  uint32_t count = 0;
  int64_t pending = 0;
  int64_t tx = 0;
};

// A bulk copy issued but not yet performed (Options::copies == CopyTiming::AtWait).
struct PendingCopy {
  void* dst;
  const void* src;
  uint32_t bytes;
  uint64_t* bar;
};

// A resident block: its fibers, barrier, warps, shared memory and asynchronous copies.
struct BlockSlot {
  uint3 idx{0, 0, 0};
  int first = 0;  // its first fiber in Runtime::fibers
  int done = 0;
  // block barrier
  int bar_arrived = 0;
  unsigned bar_gen = 0;
  const char* bar_what = nullptr;
  Site bar_where;
  int bar_first = 0;
  int bar_count[2] = {0, 0};
  std::vector<WarpSlot> warps;
  // shared memory: [static][dynamic]
  char* shared = nullptr;
  char* dyn_shared = nullptr;
  size_t dyn_bytes = 0;
  std::vector<std::pair<uint64_t*, MBarrier>> bars;  // few per block: a linear search is fine
  std::vector<PendingCopy> copies;
};

// Fiber stacks: `bytes` each above a guard page, carved from mmap'ed regions kept across launches.
// Guard pages split a region into two kernel mappings per stack, and Linux allows ~65,000 mappings
// per process (vm.max_map_count), so only the first kGuardedStacks stacks get one.
constexpr size_t kGuardedStacks = 16384;
struct Region {
  char* map = nullptr;
  size_t size = 0;
};

std::string where_text(const Site& l) {
  const char* f = l.file_name();
  if (const char* slash = std::strrchr(f, '/')) f = slash + 1;
  return std::string(f) + ":" + std::to_string(l.line());
}
bool same_name(const char* a, const char* b) { return a == b || std::strcmp(a, b) == 0; }
bool same_site(const Site& a, const Site& b) {
  return a.line() == b.line() && a.column() == b.column() && same_name(a.file_name(), b.file_name());
}
std::string idx_text(uint3 v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

struct Runtime {
  // The launch.
  Options opt;
  Body body = nullptr;
  void* body_ctx = nullptr;
  dim3 grid, block;
  std::mt19937_64 rng;

  // The resident blocks (one at a time, or the whole grid with Options::coresident) and their fibers.
  std::vector<BlockSlot> blocks;
  std::vector<Fiber> fibers;
  std::vector<Region> regions;
  std::vector<char*> stacks;  // the lowest usable byte of each (above its guard page)
  size_t stack_bytes = 0;
  int n = 0;     // threads per block
  int done = 0;  // fibers finished (all resident blocks)
  Context sched;
  Fiber* current = nullptr;
  std::vector<Fiber*> queue;  // ring buffer: a fiber is in it iff its state is Ready
  size_t q_head = 0, q_size = 0;
  std::vector<int> order;     // scratch: wake order
  uint64_t idle_polls = 0;    // polls since anything else happened (a spin that never ends: deadlock)
  std::vector<double> slowness;  // per warp of the resident blocks (Options::skew); empty: no skew
  bool failed = false;
  std::string error;

  ~Runtime() {
    for (auto& g : regions) munmap(g.map, g.size);
  }

  void push(Fiber* f) {
    f->state = State::Ready;
    queue[(q_head + q_size++) % queue.size()] = f;
  }
  Fiber* pop() {
    if (q_size == 0) return nullptr;
    // Skew (Options::skew): a fiber of a slow warp at the head gives up its turn with its warp's
    // probability, so that warp (and its block, at barriers) falls behind the others.
    for (int tries = 0; tries < 8 && q_size > 1 && !slowness.empty(); ++tries) {
      Fiber* head = queue[q_head];
      const size_t warp = size_t(head->slot) * size_t(n / 32) + size_t(head->regs.warp);
      if (std::uniform_real_distribution<double>(0.0, 1.0)(rng) >= slowness[warp]) break;
      q_head = (q_head + 1) % queue.size();
      queue[(q_head + q_size - 1) % queue.size()] = head;
    }
    Fiber* f = queue[q_head];
    q_head = (q_head + 1) % queue.size();
    --q_size;
    return f;
  }
  // Makes `count` fibers of block slot b, from its thread `first`, runnable in the configured order.
  void wake(const BlockSlot& b, int first, int count) {
    order.resize(size_t(count));
    std::iota(order.begin(), order.end(), b.first + first);
    if (opt.threads == Order::Reverse) std::reverse(order.begin(), order.end());
    if (opt.threads == Order::Random) std::shuffle(order.begin(), order.end(), rng);
    for (int i : order) push(&fibers[size_t(i)]);
  }
  void progress() { idle_polls = 0; }
  std::string thread_text(const Fiber& f) const {
    return "thread " + idx_text(f.regs.thread_idx) + " (warp " + std::to_string(f.regs.warp) + " lane " +
           std::to_string(f.regs.lane) + ") of block " + idx_text(f.regs.block_idx);
  }
};

thread_local Runtime* g_rt = nullptr;   // the launch in progress
thread_local std::unique_ptr<Runtime> g_cache;  // its stacks and buffers, kept between launches

Runtime& rt() {
  if (!g_rt) outside_kernel("a synchronization");
  return *g_rt;
}

#if SIMT_ASAN
void asan_before(Context* from, const Context& to, bool from_exits) {
  __sanitizer_start_switch_fiber(from_exits ? nullptr : &from->fake_stack, to.stack_bottom, to.stack_size);
}
void asan_after(Context& self) { __sanitizer_finish_switch_fiber(self.fake_stack, nullptr, nullptr); }
#endif

void transfer(Context& from, Context& to, bool from_exits) {
#if SIMT_ASAN
  asan_before(&from, to, from_exits);
#else
  (void)from_exits;
#endif
#if SIMT_USE_UCONTEXT
  swapcontext(&from.uc, &to.uc);
#else
  asm volatile("" ::: "memory");
  simt_switch_context(&from.sp, to.sp);
  asm volatile("" ::: "memory");
#endif
#if SIMT_ASAN
  asan_after(from);
#endif
}

// The running fiber stops (its state says why) and the next runnable one runs, or the scheduler when
// none is (block finished, deadlock, or failure). Returns when the fiber is resumed.
void switch_away(Fiber* me, bool exits) {
  Runtime& r = *g_rt;
  Fiber* next = r.failed ? nullptr : r.pop();
  if (next == me) {
    me->state = State::Running;
    return;
  }
  r.current = next;
  g_regs = next ? &next->regs : nullptr;
  if (next) next->state = State::Running;
  transfer(me->ctx, next ? next->ctx : r.sched, exits);
}

[[noreturn]] void fiber_run(Fiber* f) {
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  Runtime& r = *g_rt;
  BlockSlot& b = r.blocks[size_t(f->slot)];
  try {
    r.body(r.body_ctx, b.shared);
  } catch (const Fault& e) {
    if (!r.failed) r.error = e.message;
    r.failed = true;
  } catch (const std::exception& e) {
    if (!r.failed) r.error = r.thread_text(*f) + " threw: " + e.what();
    r.failed = true;
  } catch (...) {
    if (!r.failed) r.error = r.thread_text(*f) + " threw a non-standard exception";
    r.failed = true;
  }
  f->state = State::Done;
  ++r.done;
  r.progress();
  if (++b.done == r.n && !b.copies.empty() && !r.failed) {
    r.error = "simt: block " + idx_text(b.idx) + " exited with " + std::to_string(b.copies.size()) +
              " bulk copy(ies) into its shared memory still in flight (no wait on their mbarrier)";
    r.failed = true;
  }
  switch_away(f, true);
  std::fprintf(stderr, "simt: a finished fiber was resumed\n");
  std::abort();
}

#if SIMT_USE_UCONTEXT
void fiber_entry_uc(unsigned hi, unsigned lo) {
  fiber_run(reinterpret_cast<Fiber*>((uintptr_t(hi) << 32) | uintptr_t(lo)));
}
#else
extern "C" void simt_fiber_entry(void* f) { fiber_run(static_cast<Fiber*>(f)); }
#endif

void init_fiber(Fiber& f) {
#if SIMT_ASAN
  __asan_unpoison_memory_region(f.stack_lo, f.stack_size);  // frames of an aborted launch
  f.ctx.stack_bottom = f.stack_lo;
  f.ctx.stack_size = f.stack_size;
  f.ctx.fake_stack = nullptr;
#endif
#if SIMT_USE_UCONTEXT
  getcontext(&f.ctx.uc);
  f.ctx.uc.uc_stack.ss_sp = f.stack_lo;
  f.ctx.uc.uc_stack.ss_size = f.stack_size;
  f.ctx.uc.uc_link = nullptr;
  const uintptr_t p = reinterpret_cast<uintptr_t>(&f);
  makecontext(&f.ctx.uc, reinterpret_cast<void (*)()>(fiber_entry_uc), 2, unsigned(p >> 32), unsigned(p));
#else
  const uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack_lo) + f.stack_size) & ~uintptr_t(15);
  auto* sp = reinterpret_cast<uint64_t*>(top - 64);
  uint32_t mxcsr = 0;
  uint16_t fcw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fcw));
  sp[0] = uint64_t(mxcsr) | uint64_t(fcw) << 32;  // [rsp]: MXCSR, [rsp + 4]: x87 control word
  sp[1] = 0;                                                      // r15
  sp[2] = 0;                                                      // r14
  sp[3] = reinterpret_cast<uint64_t>(&simt_fiber_entry);          // r13
  sp[4] = reinterpret_cast<uint64_t>(&f);                         // r12
  sp[5] = 0;                                                      // rbx
  sp[6] = 0;                                                      // rbp
  sp[7] = reinterpret_cast<uint64_t>(&simt_fiber_trampoline);     // return address
  f.ctx.sp = sp;
#endif
}

void ensure_stacks(Runtime& r, int n) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t bytes = (std::max<size_t>(r.opt.stack_bytes, 16 * 1024) + page - 1) / page * page;
  if (bytes != r.stack_bytes) {
    for (auto& g : r.regions) munmap(g.map, g.size);
    r.regions.clear();
    r.stacks.clear();
    r.stack_bytes = bytes;
  }
  if (r.stacks.size() >= size_t(n)) return;
  const size_t more = size_t(n) - r.stacks.size(), slot = bytes + page;
  Region g;
  g.size = more * slot;
  void* m = mmap(nullptr, g.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) throw Error("simt: cannot map " + std::to_string(more) + " fiber stacks");
  g.map = static_cast<char*>(m);
  r.regions.push_back(g);
  for (size_t i = 0; i < more; ++i) {
    char* lo = g.map + i * slot;
    if (r.stacks.size() < kGuardedStacks) mprotect(lo, page, PROT_NONE);  // guard page: an overflow faults
    r.stacks.push_back(lo + page);
  }
}

std::string block_report(Runtime& r, const BlockSlot& b) {
  int exited = 0, at_barrier = 0, at_warp = 0, polling = 0;
  const Fiber* poller = nullptr;
  for (int i = 0; i < r.n; ++i) {
    const Fiber& f = r.fibers[size_t(b.first + i)];
    exited += f.state == State::Done;
    at_barrier += f.state == State::Barrier;
    at_warp += f.state == State::Warp;
    if (f.polling) {
      ++polling;
      poller = poller ? poller : &f;
    }
  }
  std::string m = "block " + idx_text(b.idx) + ": ";
  if (at_barrier > 0 && exited > 0) {
    const Fiber* e = nullptr;
    for (int i = 0; i < r.n && !e; ++i)
      if (r.fibers[size_t(b.first + i)].state == State::Done) e = &r.fibers[size_t(b.first + i)];
    m += "barrier divergence: " + std::to_string(exited) + " thread(s) exited (first: " + r.thread_text(*e) + ") while " +
         std::to_string(at_barrier) + " wait at " + b.bar_what + " (" + where_text(b.bar_where) + ")";
  } else {
    std::vector<std::string> parts;
    if (at_barrier > 0)
      parts.push_back(std::to_string(at_barrier) + " thread(s) wait at " + std::string(b.bar_what) + " (" +
                      where_text(b.bar_where) + ")");
    if (at_warp > 0) parts.push_back(std::to_string(at_warp) + " wait at warp collectives");
    if (polling > 0)
      parts.push_back(std::to_string(polling) + " poll (first: " + r.thread_text(*poller) + " at " + poller->what + " " +
                      where_text(poller->where) + ")");
    if (exited > 0) parts.push_back(std::to_string(exited) + " exited");
    for (size_t i = 0; i < parts.size(); ++i) m += (i ? ", " : "") + parts[i];
  }
  // The first incomplete warp collective, with the lanes that are elsewhere.
  for (size_t w = 0; w < b.warps.size(); ++w) {
    const WarpSlot& s = b.warps[w];
    if (s.arrived == 0) continue;
    m += "; warp " + std::to_string(w) + ": " + std::to_string(s.arrived) + " lane(s) wait at " + s.what + " (" +
         where_text(s.where) + "), missing lanes:";
    int listed = 0;
    for (int l = 0; l < 32; ++l) {
      const Fiber& f = r.fibers[size_t(b.first) + w * 32 + size_t(l)];
      if (f.state == State::Warp) continue;
      if (listed++ < 4)
        m += " " + std::to_string(l) + (f.state == State::Done ? " (exited)" : " (at " + std::string(f.what) + " " +
                                                                                  where_text(f.where) + ")");
    }
    if (listed > 4) m += " ...";
    break;
  }
  return m;
}

// Every unfinished resident block (the first few), one per line.
std::string deadlock_report(Runtime& r, const char* headline) {
  std::string m = std::string("simt: ") + headline;
  int listed = 0, unfinished = 0;
  for (const BlockSlot& b : r.blocks) {
    if (b.done == r.n) continue;
    ++unfinished;
    if (listed++ < 8) m += "\n  " + block_report(r, b);
  }
  if (listed > 8) m += "\n  ... (" + std::to_string(unfinished - 8) + " more block(s))";
  return m;
}

void reset_slot(Runtime& r, BlockSlot& b, uint3 idx) {
  b.idx = idx;
  b.done = 0;
  b.bar_arrived = 0;
  b.bar_gen = 0;
  for (auto& w : b.warps) w.arrived = 0, w.gen = 0;
  b.bars.clear();
  b.copies.clear();
  for (int i = 0; i < r.n; ++i) {
    Fiber& f = r.fibers[size_t(b.first + i)];
    f.regs.block_idx = idx;
    f.regs.block = int(idx.x + r.grid.x * (idx.y + r.grid.y * idx.z));
    f.state = State::Ready;
    f.polling = false;
    f.what = "start";
    init_fiber(f);
  }
}

// Runs every fiber of the resident blocks (reset_slot'ed) to completion.
void run_resident(Runtime& r) {
  r.done = 0;
  r.q_head = r.q_size = 0;
  r.idle_polls = 0;
  r.failed = false;
  r.error.clear();
  for (const BlockSlot& b : r.blocks) r.wake(b, 0, r.n);
  Fiber* first = r.pop();
  r.current = first;
  first->state = State::Running;
  g_regs = &first->regs;
#if SIMT_ASAN
  {
    pthread_attr_t a;
    pthread_getattr_np(pthread_self(), &a);
    void* lo = nullptr;
    size_t size = 0;
    pthread_attr_getstack(&a, &lo, &size);
    pthread_attr_destroy(&a);
    r.sched.stack_bottom = lo;
    r.sched.stack_size = size;
  }
#endif
  transfer(r.sched, first->ctx, false);
  g_regs = nullptr;
  r.current = nullptr;
  if (r.failed) throw Error(r.error);
  if (r.done != int(r.fibers.size())) throw Error(deadlock_report(r, "deadlock: no thread can run"));
}

BlockSlot& my_block(Runtime& r) { return r.blocks[size_t(r.current->slot)]; }

MBarrier& find_mbarrier(Runtime& r, uint64_t* bar, const char* what) {
  for (auto& [addr, m] : my_block(r).bars)
    if (addr == bar) return m;
  throw Fault{"simt: " + r.thread_text(*r.current) + ": " + what + " on an mbarrier that was never initialized"};
}

// An mbarrier's phase completes when its arrivals and transaction bytes are all in.
void maybe_complete(MBarrier& m) {
  if (m.pending == 0 && m.tx == 0) {
    ++m.phase;
    m.pending = m.count;
  }
}

void perform_copy(Runtime& r, const PendingCopy& c) {
  std::memcpy(c.dst, c.src, c.bytes);
  MBarrier& m = find_mbarrier(r, c.bar, "a bulk copy's completion");
  m.tx -= c.bytes;
  maybe_complete(m);
  r.progress();
}

}  // namespace

void outside_kernel(const char* what) {
  throw Error(std::string("simt: ") + what + " used outside a kernel launched by simt::launch");
}

void fault(const std::string& message) {
  Runtime& r = rt();
  throw Fault{"simt: " + r.thread_text(*r.current) + ": " + message};
}

int block_threads() { return rt().n; }

__attribute__((noinline)) void read_only_access(const void* p, size_t bytes, const char* how) {
  if (g_observer && g_regs) g_observer->read_only(p, bytes, how, __builtin_return_address(0));
}

void* dynamic_shared() {
  Runtime& r = rt();
  return my_block(r).dyn_shared;
}

int block_barrier(const char* what, int pred, const Site& loc) {
  Runtime& r = rt();
  Fiber* me = r.current;
  BlockSlot& b = my_block(r);
  r.progress();
  if (b.bar_arrived == 0) {
    b.bar_what = what;
    b.bar_where = loc;
    b.bar_first = me->regs.linear;
    b.bar_count[b.bar_gen & 1] = 0;
  } else if (!same_name(what, b.bar_what) || (r.opt.strict_sites && !same_site(loc, b.bar_where))) {
    const Fiber& other = r.fibers[size_t(b.first + b.bar_first)];
    throw Fault{"simt: barrier divergence: " + r.thread_text(*me) + " reached " + what + " at " + where_text(loc) +
                " while " + r.thread_text(other) + " waits at " + b.bar_what + " at " + where_text(b.bar_where)};
  }
  const unsigned gen = b.bar_gen;
  b.bar_count[gen & 1] += pred != 0;
  me->state = State::Barrier;
  me->what = what;
  me->where = loc;
  if (++b.bar_arrived == r.n) {
    b.bar_arrived = 0;
    ++b.bar_gen;
    if (g_observer) g_observer->barrier_completed(me->regs.block);
    r.wake(b, 0, r.n);
  }
  switch_away(me, false);
  return b.bar_count[gen & 1];
}

const uint64_t* warp_collective(const char* what, unsigned mask, uint64_t bits, const Site& loc) {
  Runtime& r = rt();
  Fiber* me = r.current;
  r.progress();
  if (mask != 0xffffffffu) {
    char m[16];
    std::snprintf(m, sizeof m, "0x%08x", mask);
    throw Fault{"simt: " + r.thread_text(*me) + ": " + what + " at " + where_text(loc) + " with mask " + m +
                ": the emulator runs full-warp collectives only"};
  }
  BlockSlot& b = my_block(r);
  WarpSlot& w = b.warps[size_t(me->regs.warp)];
  if (w.arrived == 0) {
    w.what = what;
    w.where = loc;
    w.first_lane = me->regs.lane;
  } else if (!same_name(what, w.what) || (r.opt.strict_sites && !same_site(loc, w.where))) {
    throw Fault{"simt: warp divergence: " + r.thread_text(*me) + " reached " + what + " at " + where_text(loc) +
                " while lane " + std::to_string(w.first_lane) + " waits at " + w.what + " at " + where_text(w.where)};
  }
  const unsigned gen = w.gen;
  w.vals[gen & 1][me->regs.lane] = bits;
  me->state = State::Warp;
  me->what = what;
  me->where = loc;
  if (++w.arrived == 32) {
    w.arrived = 0;
    ++w.gen;
    r.wake(b, me->regs.warp * 32, 32);
  }
  switch_away(me, false);
  return w.vals[gen & 1];
}

}  // namespace simt::detail

namespace simt {

using detail::Fault;

void set_observer(Observer* observer) {
  if (detail::g_rt) throw Error("simt: set_observer inside a kernel");
  detail::g_observer = observer;
}

void poll(const char* what, const Site& loc) {
  detail::Runtime& r = detail::rt();
  detail::Fiber* me = r.current;
  me->what = what;
  me->where = loc;
  me->polling = true;
  // Nothing but polls for this long: every thread that could run is spinning on something no one
  // will ever change.
  if (++r.idle_polls > 2'000'000)
    throw Fault{detail::deadlock_report(r, "deadlock: threads spin on memory that no running thread changes")};
  r.push(me);
  detail::switch_away(me, false);
  me->polling = false;
}

void mbarrier_init(uint64_t* bar, unsigned count) {
  detail::Runtime& r = detail::rt();
  detail::BlockSlot& b = detail::my_block(r);
  const char* p = reinterpret_cast<const char*>(bar);
  if (reinterpret_cast<uintptr_t>(bar) % 8 != 0 || p < b.shared || p + 8 > b.dyn_shared + b.dyn_bytes)
    detail::fault("mbarrier.init outside the block's shared memory or not 8-byte aligned");
  if (count == 0) detail::fault("mbarrier.init with an arrival count of 0");
  for (auto& [addr, m] : b.bars)
    if (addr == bar) {
      m = detail::MBarrier{0, count, count, 0};
      return;
    }
  b.bars.push_back({bar, detail::MBarrier{0, count, count, 0}});
}

void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
  detail::Runtime& r = detail::rt();
  detail::MBarrier& m = detail::find_mbarrier(r, bar, "mbarrier.arrive.expect_tx");
  if (m.pending == 0) detail::fault("mbarrier.arrive on a phase whose arrivals are all in");
  m.tx += bytes;
  --m.pending;
  detail::maybe_complete(m);
}

bool mbarrier_try_wait_parity(uint64_t* bar, unsigned parity, const Site& loc) {
  detail::Runtime& r = detail::rt();
  detail::MBarrier& m = detail::find_mbarrier(r, bar, "mbarrier.try_wait");
  if ((m.phase & 1u) != (parity & 1u)) return true;  // the phase of that parity has completed
  // Still in progress: the copies it waits for land now (CopyTiming::AtWait), and the thread polls
  // again after the others had a turn.
  auto& copies = detail::my_block(r).copies;
  for (size_t i = 0; i < copies.size();) {
    if (copies[i].bar == bar) {
      const detail::PendingCopy c = copies[i];
      copies.erase(copies.begin() + std::ptrdiff_t(i));
      detail::perform_copy(r, c);
    } else {
      ++i;
    }
  }
  poll("mbarrier.try_wait", loc);
  return false;
}

void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  detail::Runtime& r = detail::rt();
  detail::BlockSlot& b = detail::my_block(r);
  const char* d = static_cast<const char*>(dst);
  if (bytes == 0 || bytes % 16 != 0) detail::fault("cp.async.bulk of " + std::to_string(bytes) + " bytes (a positive multiple of 16 is required)");
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0)
    detail::fault("cp.async.bulk with an address that is not 16-byte aligned");
  if (d < b.dyn_shared || d + bytes > b.dyn_shared + b.dyn_bytes)
    detail::fault("cp.async.bulk destination outside the block's dynamic shared memory");
  detail::find_mbarrier(r, bar, "cp.async.bulk");
  if (detail::g_observer) detail::g_observer->read_only(src, bytes, "cp.async.bulk", __builtin_return_address(0));
  const detail::PendingCopy c{dst, src, bytes, bar};
  if (r.opt.copies == CopyTiming::AtIssue) detail::perform_copy(r, c);
  else b.copies.push_back(c);
}

void bulk_prefetch_l2(const void* src, unsigned bytes) {
  if (bytes == 0 || bytes % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0)
    detail::fault("cp.async.bulk.prefetch.L2 of " + std::to_string(bytes) + " bytes at a misaligned or empty range");
}

}  // namespace simt

namespace simt::detail {

void launch(dim3 grid, dim3 block, size_t shared_bytes, size_t shared_align, Body body, void* ctx, const Options& o) {
  if (g_rt) throw Error("simt: launch from inside a kernel (no dynamic parallelism)");
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || threads % 32 != 0)
    throw Error("simt: a block of " + std::to_string(threads) + " threads (the emulator runs 32..1024, a multiple of 32)");
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  if (blocks == 0) throw Error("simt: an empty grid");
  if (o.coresident && blocks * threads > 131072)
    throw Error("simt: a co-resident grid of " + std::to_string(blocks * threads) + " threads (at most 131,072)");
  if (!g_cache) g_cache = std::make_unique<Runtime>();
  Runtime& r = *g_cache;
  r.opt = o;
  r.body = body;
  r.body_ctx = ctx;
  r.grid = grid;
  r.block = block;
  r.rng.seed(o.seed);
  r.n = int(threads);
  const int resident = o.coresident ? int(blocks) : 1;
  ensure_stacks(r, r.n * resident);
  r.fibers.assign(size_t(r.n) * size_t(resident), Fiber{});
  r.blocks.assign(size_t(resident), BlockSlot{});
  for (int s = 0; s < resident; ++s) {
    BlockSlot& b = r.blocks[size_t(s)];
    b.first = s * r.n;
    b.warps.assign(size_t(r.n / 32), WarpSlot{});
    for (int i = 0; i < r.n; ++i) {
      Fiber& f = r.fibers[size_t(b.first + i)];
      f.regs.thread_idx = {unsigned(i) % block.x, unsigned(i) / block.x % block.y, unsigned(i) / (block.x * block.y)};
      f.regs.block_dim = block;
      f.regs.grid_dim = grid;
      f.regs.linear = i;
      f.regs.lane = i % 32;
      f.regs.warp = i / 32;
      f.slot = s;
      f.stack_lo = r.stacks[size_t(b.first + i)];
      f.stack_size = r.stack_bytes;
      f.regs.stack_lo = f.stack_lo;
      f.regs.stack_hi = f.stack_lo + f.stack_size;
    }
  }
  r.queue.assign(r.fibers.size(), nullptr);
  // Shared memory of each resident block: [static (shared_bytes)][dynamic], 0xA5-filled per block.
  const size_t align = std::max<size_t>(shared_align, 16);
  const size_t dyn_off = (shared_bytes + 15) / 16 * 16;
  const size_t per_block = (std::max<size_t>(dyn_off + o.dynamic_shared_bytes, 16) + align - 1) / align * align;
  const size_t total = per_block * size_t(resident);
  struct Free {
    size_t align;
    void operator()(void* p) const { ::operator delete(p, std::align_val_t(align)); }
  };
  std::unique_ptr<void, Free> mem(::operator new(total, std::align_val_t(align)), Free{align});
  for (int s = 0; s < resident; ++s) {
    BlockSlot& b = r.blocks[size_t(s)];
    b.shared = static_cast<char*>(mem.get()) + size_t(s) * per_block;
    b.dyn_shared = b.shared + dyn_off;
    b.dyn_bytes = o.dynamic_shared_bytes;
    for (int i = 0; i < r.n; ++i) {
      Fiber& f = r.fibers[size_t(b.first + i)];
      f.regs.shared_lo = b.shared;
      f.regs.shared_hi = b.shared + per_block;
    }
  }

  r.slowness.clear();
  if (o.skew > 0.0) {
    // A random half of the blocks is slow, and a random half of the warps of every block: a warp gives
    // up its turn with probability 1 - (1 - block's) (1 - its own), each drawn in [skew / 2, skew].
    auto draw = [&] { return r.rng() % 2 ? std::uniform_real_distribution<double>(o.skew / 2, o.skew)(r.rng) : 0.0; };
    for (int s = 0; s < resident; ++s) {
      const double block_p = resident > 1 ? draw() : 0.0;
      for (int w = 0; w < r.n / 32; ++w) r.slowness.push_back(1.0 - (1.0 - block_p) * (1.0 - draw()));
    }
  }

  std::vector<uint64_t> block_order(blocks);
  std::iota(block_order.begin(), block_order.end(), uint64_t(0));
  if (o.blocks == Order::Reverse) std::reverse(block_order.begin(), block_order.end());
  if (o.blocks == Order::Random) std::shuffle(block_order.begin(), block_order.end(), r.rng);
  auto idx_of = [&](uint64_t b) {
    return uint3{unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / (uint64_t(grid.x) * grid.y))};
  };

  g_rt = &r;
  if (g_observer) g_observer->launch_begin(blocks, r.n, o.coresident);
  try {
    std::memset(mem.get(), 0xA5, total);
    if (o.coresident) {
      // Slot s holds the s-th block of the order: the initial run queue follows the block order.
      for (int s = 0; s < resident; ++s) reset_slot(r, r.blocks[size_t(s)], idx_of(block_order[size_t(s)]));
      run_resident(r);
    } else {
      for (uint64_t b : block_order) {
        std::memset(mem.get(), 0xA5, total);
        reset_slot(r, r.blocks[0], idx_of(b));
        run_resident(r);
      }
    }
  } catch (...) {
    g_rt = nullptr;
    g_regs = nullptr;
    if (g_observer) g_observer->launch_end();
    throw;
  }
  g_rt = nullptr;
  if (g_observer) {
    const std::string found = g_observer->launch_end();
    if (!found.empty()) throw Error(found);
  }
}

}  // namespace simt::detail
