// The megakernel's work plan, checked on the host for every compiled config and many CTA counts
// (no GPU needed: schedule.cuh and layout.h are host-and-device code). A mistake here is a deadlock
// or silently missing rows on the GPU; here it is a readable failure:
//   - each matrix's rows are split into disjoint, contiguous CTA ranges that cover it exactly
//     (gate/up in whole pairs), cut into chunks that fit a weight buffer, 16-byte sized and aligned
//     (cp.async.bulk's rule);
//   - the chunk sequence of a token visits the CTA's rows of qkv, o, gate_up, down per layer, then
//     the LM head, in order, and repeats identically for the next token;
//   - the QkvReady counts the CTAs add per kv group sum to the (G + 2) * D rows stage B waits for;
//   - the attention splits cover positions [0, n) exactly, the one holding n - 1 is the last
//     non-empty split (it appends the new k/v), and never more than kMaxSplits are used;
//   - the counters have distinct slots; the selection's register capacity covers the vocabulary
//     slice and the candidates at every CTA count the runner allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "megaqwen/cuda/megakernel/configs.cuh"
#include "megaqwen/cuda/megakernel/layout.h"
#include "megaqwen/cuda/megakernel/schedule.cuh"

namespace megaqwen::cuda::mk {
namespace {

constexpr int kQwenVocab = 151936;
// CTA counts of sm_90 parts (H100 PCIe 114, H100 SXM / H200 / GH200 132, H20 78) and edges.
const std::vector<int> kCtaCounts = {16, 17, 64, 78, 100, 114, 131, 132};

// Fake weight pointers: distinct, 256-byte aligned bases (as cudaMalloc gives) per matrix and layer.
struct FakeWeights {
  std::vector<LayerWeights> layers;
  Params p{};
  explicit FakeWeights(int L) : layers(size_t(L)) {
    uintptr_t base = 1ull << 40;
    auto next = [&base]() {
      base += 1ull << 32;
      return reinterpret_cast<const uint16_t*>(base);
    };
    for (auto& lw : layers) {
      lw.qkv = next();
      lw.o = next();
      lw.gate_up = next();
      lw.down = next();
    }
    p.layers = layers.data();
    p.lm_head = next();
  }
};

template <class C>
void check_config(const char* name, int vocab) {
  SCOPED_TRACE(name);
  const int rows_of[int(Mat::Count)] = {C::QKV_ROWS, C::H, 2 * C::I, C::H, vocab};
  FakeWeights fw(C::L);
  for (int ctas : kCtaCounts) {
    SCOPED_TRACE("ctas " + std::to_string(ctas));
    std::vector<Schedule<C>> sched(static_cast<size_t>(ctas));
    for (int cta = 0; cta < ctas; ++cta) sched[size_t(cta)].init(cta, ctas, vocab);

    // Row ranges: disjoint, contiguous, covering; chunks fit the buffer.
    for (int m = 0; m < int(Mat::Count); ++m) {
      int next_row = 0;
      for (int cta = 0; cta < ctas; ++cta) {
        const Part& pt = sched[size_t(cta)].part[m];
        if (pt.rows == 0) continue;
        ASSERT_EQ(pt.row0, next_row) << "matrix " << m << " cta " << cta;
        next_row += pt.rows;
        const size_t row_bytes = size_t(Schedule<C>::width(Mat(m))) * 2;
        ASSERT_GE(pt.chunk_rows, m == int(Mat::GateUp) ? 2 : 1);
        ASSERT_LE(size_t(pt.chunk_rows) * row_bytes, C::kBufBytes) << "matrix " << m;
        ASSERT_EQ(pt.chunks, (pt.rows + pt.chunk_rows - 1) / pt.chunk_rows);
        if (m == int(Mat::GateUp)) {
          ASSERT_EQ(pt.row0 % 2, 0) << "gate/up pairs split";
          ASSERT_EQ(pt.rows % 2, 0);
          ASSERT_EQ(pt.chunk_rows % 2, 0);
        }
      }
      ASSERT_EQ(next_row, rows_of[m]) << "matrix " << m << " rows not covered";
    }

    // Chunk sequences: per token, the CTA's rows of each matrix in order, twice over.
    for (int cta = 0; cta < ctas; ++cta) {
      const Schedule<C>& s = sched[size_t(cta)];
      int expect_per_token = 0;
      for (int m = 0; m < int(Mat::Lm); ++m) expect_per_token += C::L * s.part[m].chunks;
      expect_per_token += s.part[int(Mat::Lm)].chunks;
      ASSERT_EQ(s.per_token, expect_per_token);
      if (s.per_token == 0) continue;
      uint32_t idx = 0;
      for (int token = 0; token < 2; ++token) {
        for (int l = 0; l <= C::L; ++l) {
          const int first = l < C::L ? 0 : int(Mat::Lm), last = l < C::L ? int(Mat::Lm) : int(Mat::Count);
          for (int m = first; m < last; ++m) {
            const Part& pt = s.part[m];
            const LayerWeights& lw = fw.layers[size_t(l < C::L ? l : 0)];
            const uint16_t* base = m == 0 ? lw.qkv : m == 1 ? lw.o : m == 2 ? lw.gate_up : m == 3 ? lw.down : fw.p.lm_head;
            const size_t K = size_t(Schedule<C>::width(Mat(m)));
            int row = pt.row0;
            for (int j = 0; j < pt.chunks; ++j, ++idx) {
              const Chunk ch = s.chunk(fw.p, idx);
              const int n = std::min(pt.chunk_rows, pt.row0 + pt.rows - row);
              ASSERT_EQ(ch.src, base + size_t(row) * K) << "token " << token << " layer " << l << " matrix " << m;
              ASSERT_EQ(ch.bytes, uint32_t(size_t(n) * K * 2));
              ASSERT_EQ(ch.bytes % 16, 0u);
              ASSERT_EQ(reinterpret_cast<uintptr_t>(ch.src) % 16, 0u);
              ASSERT_LE(ch.bytes, C::kBufBytes);
              row += n;
            }
            ASSERT_EQ(row, pt.row0 + pt.rows);
          }
        }
      }
      ASSERT_EQ(idx, uint32_t(2 * s.per_token));
    }

    // QkvReady: per group, the CTAs' counts add up to the target of one token.
    for (int g = 0; g < C::KV_HEADS; ++g) {
      int sum = 0;
      for (int cta = 0; cta < ctas; ++cta) {
        const Part& pt = sched[size_t(cta)].part[int(Mat::Qkv)];
        sum += qkv_group_rows<C>(pt.row0, pt.rows, g);
      }
      ASSERT_EQ(sum, (C::G + 2) * C::D) << "kv group " << g;
    }

    // Attention splits.
    const int splits = attention_splits(ctas, C::KV_HEADS);
    ASSERT_GE(splits, 1);
    ASSERT_LE(splits, kMaxSplits);
    // The ranges the kernel reads (attention_split, what stage_attention.cuh calls): the non-empty
    // ones tile [0, n) in order, each aligned to 8 positions, and exactly one appends the new row.
    for (int n : {1, 2, 63, 64, 65, 127, 128, 129, 1000, 4095, 4096, 8200, 16385, 32768, 40960, 131072}) {
      int covered = 0, appenders = 0, appender = -1, last_used = -1;
      bool seen_empty = false;
      for (int s = 0; s < splits; ++s) {
        const AttentionSplit r = attention_split(n, splits, s);
        if (r.empty()) {
          seen_empty = true;
          EXPECT_FALSE(r.appends(n));
          continue;
        }
        ASSERT_FALSE(seen_empty) << "an empty split before a used one, n " << n << ", split " << s;
        ASSERT_EQ(r.begin, covered) << "n " << n << ", split " << s;
        ASSERT_EQ(r.begin % 8, 0);
        ASSERT_GT(r.end, r.begin);
        covered = r.end;
        last_used = s;
        if (r.appends(n)) ++appenders, appender = s;
      }
      ASSERT_EQ(covered, n) << "n " << n;
      ASSERT_EQ(appenders, 1) << "n " << n;
      ASSERT_EQ(appender, last_used) << "n " << n;
      ASSERT_EQ(attention_used_splits(n, splits), last_used + 1) << "n " << n << ": what the merge reads";
      ASSERT_LE(last_used + 1, splits);
      // Past the minimum chunk the work spreads over every split (no split holds twice its share).
      if (n >= splits * kMinAttnChunk) {
        EXPECT_LE(attention_chunk(n, splits), (n + splits - 1) / splits + 7) << "n " << n;
      }
    }

    // Token selection capacity (the runner refuses top-k otherwise; greedy needs none).
    EXPECT_LE((vocab + ctas - 1) / ctas, kThreads * kSelPerThread) << "vocabulary slice";
    EXPECT_LE(ctas * kMaxTopK, kThreads * kSelPerThread) << "candidates";
  }

  // Counter slots: distinct and inside the array.
  const CounterLayout lay{C::L, C::KV_HEADS};
  std::vector<int> used(size_t(lay.count()), 0);
  auto mark = [&](Counter c, int l, int g) {
    const int s = lay.slot(c, l, g);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, lay.count());
    ++used[size_t(s)];
    ASSERT_EQ(lay.word(c, l, g), s * kCounterStride);
  };
  for (int l = 0; l < C::L; ++l) {
    for (int g = 0; g < C::KV_HEADS; ++g) {
      mark(Counter::QkvReady, l, g);
      mark(Counter::AttnTicket, l, g);
    }
    for (Counter c : {Counter::AttnReady, Counter::ODone, Counter::MlpDone, Counter::DownDone}) mark(c, l, 0);
  }
  for (Counter c : {Counter::LmTicket, Counter::Step, Counter::Done, Counter::StopSeen}) mark(c, 0, 0);
  for (size_t i = 0; i < used.size(); ++i) EXPECT_EQ(used[i], 1) << "counter slot " << i;
}

TEST(MegakernelPlan, Qwen3_06b) { check_config<ConfigQwen3_06B>("qwen3-0.6b", kQwenVocab); }
TEST(MegakernelPlan, Qwen3_17b) { check_config<ConfigQwen3_17B>("qwen3-1.7b", kQwenVocab); }
TEST(MegakernelPlan, Qwen3_4b) { check_config<ConfigQwen3_4B>("qwen3-4b", kQwenVocab); }
// The tiny test preset: small vocabularies leave CTAs without LM-head rows (and a vocabulary smaller
// than the CTA count leaves some with no rows of anything but qkv).
TEST(MegakernelPlan, TinyTest) {
  check_config<ConfigTinyTest>("tiny-test", 1000);
  check_config<ConfigTinyTest>("tiny-test small vocab", 50);
}

// Shared memory per config, printed for the record (static_asserts in configs.cuh enforce the limit).
TEST(MegakernelPlan, SharedMemoryBudgets) {
  auto show = [](const char* name, size_t smem, size_t buf) {
    std::printf("%-12s %7zu B shared memory, weight buffers 3 x %zu B\n", name, smem, buf);
    EXPECT_LE(smem, kSmemLimit);
  };
  show("qwen3-0.6b", ConfigQwen3_06B::kSmemBytes, ConfigQwen3_06B::kBufBytes);
  show("qwen3-1.7b", ConfigQwen3_17B::kSmemBytes, ConfigQwen3_17B::kBufBytes);
  show("qwen3-4b", ConfigQwen3_4B::kSmemBytes, ConfigQwen3_4B::kBufBytes);
  show("tiny-test", ConfigTinyTest::kSmemBytes, ConfigTinyTest::kBufBytes);
}

}  // namespace
}  // namespace megaqwen::cuda::mk
