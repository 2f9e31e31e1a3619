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

thread_local const ThreadRegs* g_regs = nullptr;

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

// Fiber stacks (mmap'ed with a guard page below), kept across launches.
struct Stack {
  char* map = nullptr;
  size_t map_size = 0;
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
  void* shared = nullptr;
  void* dyn_shared = nullptr;
  dim3 grid, block;
  uint3 block_idx{0, 0, 0};
  std::mt19937_64 rng;

  // The block.
  std::vector<Fiber> fibers;
  std::vector<Stack> stacks;
  size_t stack_bytes = 0;
  int n = 0, done = 0;
  Context sched;
  Fiber* current = nullptr;
  std::vector<Fiber*> queue;  // ring buffer: a fiber is in it iff its state is Ready
  size_t q_head = 0, q_size = 0;
  std::vector<int> order;     // scratch: wake order
  // block barrier
  int bar_arrived = 0;
  unsigned bar_gen = 0;
  const char* bar_what = nullptr;
  Site bar_where;
  int bar_first = 0;
  int bar_count[2] = {0, 0};
  std::vector<WarpSlot> warps;
  bool failed = false;
  std::string error;

  ~Runtime() {
    for (auto& s : stacks)
      if (s.map) munmap(s.map, s.map_size);
  }

  void push(Fiber* f) {
    f->state = State::Ready;
    queue[(q_head + q_size++) % queue.size()] = f;
  }
  Fiber* pop() {
    if (q_size == 0) return nullptr;
    Fiber* f = queue[q_head];
    q_head = (q_head + 1) % queue.size();
    --q_size;
    return f;
  }
  // Makes the fibers with linear ids ids[0..count) runnable, in the configured order.
  void wake(int first, int count) {
    order.resize(size_t(count));
    std::iota(order.begin(), order.end(), first);
    if (opt.threads == Order::Reverse) std::reverse(order.begin(), order.end());
    if (opt.threads == Order::Random) std::shuffle(order.begin(), order.end(), rng);
    for (int i : order) push(&fibers[size_t(i)]);
  }
  std::string thread_text(const Fiber& f) const {
    return "thread " + idx_text(f.regs.thread_idx) + " (warp " + std::to_string(f.regs.warp) + " lane " +
           std::to_string(f.regs.lane) + ") of block " + idx_text(block_idx);
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
  try {
    r.body(r.body_ctx, r.shared);
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
    for (auto& s : r.stacks)
      if (s.map) munmap(s.map, s.map_size);
    r.stacks.clear();
    r.stack_bytes = bytes;
  }
  while (r.stacks.size() < size_t(n)) {
    Stack s;
    s.map_size = bytes + page;
    void* m = mmap(nullptr, s.map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw Error("simt: cannot map a fiber stack");
    s.map = static_cast<char*>(m);
    mprotect(s.map, page, PROT_NONE);  // guard page: an overflow faults
    r.stacks.push_back(s);
  }
}

std::string deadlock_report(Runtime& r) {
  int exited = 0, at_barrier = 0, at_warp = 0;
  for (const Fiber& f : r.fibers) {
    exited += f.state == State::Done;
    at_barrier += f.state == State::Barrier;
    at_warp += f.state == State::Warp;
  }
  std::string m = "simt: deadlock in block " + idx_text(r.block_idx) + ": ";
  if (at_barrier > 0 && exited > 0) {
    const Fiber* e = nullptr;
    for (const Fiber& f : r.fibers)
      if (f.state == State::Done) e = e ? e : &f;
    m += "barrier divergence: " + std::to_string(exited) + " thread(s) exited (first: " + r.thread_text(*e) + ") while " +
         std::to_string(at_barrier) + " wait at " + r.bar_what + " (" + where_text(r.bar_where) + ")";
  } else if (at_barrier > 0) {
    m += std::to_string(at_barrier) + " thread(s) wait at " + std::string(r.bar_what) + " (" + where_text(r.bar_where) +
         ") while " + std::to_string(at_warp) + " wait at a warp collective";
  } else {
    m += std::to_string(at_warp) + " thread(s) wait at warp collectives, " + std::to_string(exited) + " exited";
  }
  // The first incomplete warp collective, with the lanes that are elsewhere.
  for (size_t w = 0; w < r.warps.size(); ++w) {
    const WarpSlot& s = r.warps[w];
    if (s.arrived == 0) continue;
    m += "; warp " + std::to_string(w) + ": " + std::to_string(s.arrived) + " lane(s) wait at " + s.what + " (" +
         where_text(s.where) + "), missing lanes:";
    int listed = 0;
    for (int l = 0; l < 32; ++l) {
      const Fiber& f = r.fibers[w * 32 + size_t(l)];
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

void run_block(Runtime& r) {
  for (size_t i = 0; i < r.fibers.size(); ++i) {
    Fiber& f = r.fibers[i];
    f.regs.block_idx = r.block_idx;
    f.state = State::Ready;
    f.what = "start";
    init_fiber(f);
  }
  r.done = 0;
  r.q_head = r.q_size = 0;
  r.bar_arrived = 0;
  r.bar_gen = 0;
  for (auto& w : r.warps) w.arrived = 0, w.gen = 0;
  r.failed = false;
  r.error.clear();
  r.wake(0, r.n);
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
  if (r.done != r.n) throw Error(deadlock_report(r));
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

void* dynamic_shared() {
  Runtime& r = rt();
  return r.dyn_shared;
}

int block_barrier(const char* what, int pred, const Site& loc) {
  Runtime& r = rt();
  Fiber* me = r.current;
  if (r.bar_arrived == 0) {
    r.bar_what = what;
    r.bar_where = loc;
    r.bar_first = me->regs.linear;
    r.bar_count[r.bar_gen & 1] = 0;
  } else if (!same_name(what, r.bar_what) || (r.opt.strict_sites && !same_site(loc, r.bar_where))) {
    const Fiber& other = r.fibers[size_t(r.bar_first)];
    throw Fault{"simt: barrier divergence: " + r.thread_text(*me) + " reached " + what + " at " + where_text(loc) +
                " while " + r.thread_text(other) + " waits at " + r.bar_what + " at " + where_text(r.bar_where)};
  }
  const unsigned gen = r.bar_gen;
  r.bar_count[gen & 1] += pred != 0;
  me->state = State::Barrier;
  me->what = what;
  me->where = loc;
  if (++r.bar_arrived == r.n) {
    r.bar_arrived = 0;
    ++r.bar_gen;
    r.wake(0, r.n);
  }
  switch_away(me, false);
  return r.bar_count[gen & 1];
}

const uint64_t* warp_collective(const char* what, unsigned mask, uint64_t bits, const Site& loc) {
  Runtime& r = rt();
  Fiber* me = r.current;
  if (mask != 0xffffffffu) {
    char m[16];
    std::snprintf(m, sizeof m, "0x%08x", mask);
    throw Fault{"simt: " + r.thread_text(*me) + ": " + what + " at " + where_text(loc) + " with mask " + m +
                ": the emulator runs full-warp collectives only"};
  }
  WarpSlot& w = r.warps[size_t(me->regs.warp)];
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
    r.wake(me->regs.warp * 32, 32);
  }
  switch_away(me, false);
  return w.vals[gen & 1];
}

void launch(dim3 grid, dim3 block, size_t shared_bytes, size_t shared_align, Body body, void* ctx, const Options& o) {
  if (g_rt) throw Error("simt: launch from inside a kernel (no dynamic parallelism)");
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || threads % 32 != 0)
    throw Error("simt: a block of " + std::to_string(threads) + " threads (the emulator runs 32..1024, a multiple of 32)");
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  if (blocks == 0) throw Error("simt: an empty grid");
  if (!g_cache) g_cache = std::make_unique<Runtime>();
  Runtime& r = *g_cache;
  r.opt = o;
  r.body = body;
  r.body_ctx = ctx;
  r.grid = grid;
  r.block = block;
  r.rng.seed(o.seed);
  r.n = int(threads);
  ensure_stacks(r, r.n);
  r.fibers.assign(size_t(r.n), Fiber{});
  for (int i = 0; i < r.n; ++i) {
    Fiber& f = r.fibers[size_t(i)];
    f.regs.thread_idx = {unsigned(i) % block.x, unsigned(i) / block.x % block.y, unsigned(i) / (block.x * block.y)};
    f.regs.block_dim = block;
    f.regs.grid_dim = grid;
    f.regs.linear = i;
    f.regs.lane = i % 32;
    f.regs.warp = i / 32;
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    f.stack_lo = r.stacks[size_t(i)].map + page;
    f.stack_size = r.stack_bytes;
  }
  r.queue.assign(size_t(r.n), nullptr);
  r.warps.assign(size_t(r.n / 32), WarpSlot{});
  // Shared memory: [static (shared_bytes)][dynamic], fresh for every block.
  const size_t align = std::max<size_t>(shared_align, 16);
  const size_t dyn_off = (shared_bytes + 15) / 16 * 16;
  const size_t total = std::max<size_t>(dyn_off + o.dynamic_shared_bytes, 16);
  struct Free {
    size_t align;
    void operator()(void* p) const { ::operator delete(p, std::align_val_t(align)); }
  };
  std::unique_ptr<void, Free> mem(::operator new(total, std::align_val_t(align)), Free{align});
  r.shared = mem.get();
  r.dyn_shared = static_cast<char*>(mem.get()) + dyn_off;

  std::vector<uint64_t> block_order(blocks);
  std::iota(block_order.begin(), block_order.end(), uint64_t(0));
  if (o.blocks == Order::Reverse) std::reverse(block_order.begin(), block_order.end());
  if (o.blocks == Order::Random) std::shuffle(block_order.begin(), block_order.end(), r.rng);

  g_rt = &r;
  try {
    for (uint64_t b : block_order) {
      r.block_idx = {unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / (uint64_t(grid.x) * grid.y))};
      std::memset(mem.get(), 0xA5, total);
      run_block(r);
    }
  } catch (...) {
    g_rt = nullptr;
    g_regs = nullptr;
    throw;
  }
  g_rt = nullptr;
}

}  // namespace simt::detail
