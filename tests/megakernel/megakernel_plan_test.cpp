// The megakernel's work plan, checked on the host for every compiled config and many CTA counts
// (no GPU needed: schedule.cuh and layout.h are host-and-device code). A mistake here is a deadlock
// or silently missing rows on the GPU; here it is a readable failure:
//   - each matrix's rows are split into disjoint, contiguous CTA ranges that cover it exactly
//     (gate/up in whole pairs), cut into chunks that fit a weight buffer, 16-byte sized and aligned
//     (cp.async.bulk's rule);
//   - the chunk sequence of a token visits the CTA's rows of qkv, o, gate_up, down per layer, then
//     the LM head, in order, and repeats identically for the next token; with the one-stage MLP
//     down^T's rows in place of down's, exactly the units of the CTA's gate/up pairs, within the
//     shared memory that holds their act;
//   - the QkvReady counts the CTAs add per kv group sum to the (G + 2) * D rows stage B waits for
//     (hybrid gated attention: (2G + 2) * D; DeltaNet groups: delta_group_count, covering in_proj);
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
      lw.down_t = next();
      lw.in_proj = next();
      lw.out = next();
    }
    p.layers = layers.data();
    p.lm_head = next();
  }
};

// The matrix a layer's m-th stream slot reads (the kernel's order: mixer in, mixer out, gate_up, down).
const uint16_t* matrix_base(const LayerWeights& lw, Mat m) {
  switch (m) {
    case Mat::Qkv: return lw.qkv;
    case Mat::O: return lw.o;
    case Mat::GateUp: return lw.gate_up;
    case Mat::Down: return lw.down;
    case Mat::In: return lw.in_proj;
    case Mat::Out: return lw.out;
    case Mat::DownT: return lw.down_t;
    default: return nullptr;
  }
}

// delta_mask: the DeltaNet layers of a hybrid config (bit l), 0 for Qwen3. one_stage: the one-stage
// MLP's schedule (down^T by units).
template <class C>
void check_config(const char* name, int vocab, uint64_t delta_mask = 0, bool one_stage = false) {
  SCOPED_TRACE(std::string(name) + (one_stage ? ", one-stage MLP" : ""));
  int in_rows = 0, out_rows = 0;
  if constexpr (C::kHybrid) in_rows = C::IN_ROWS, out_rows = C::H;
  const int rows_of[int(Mat::Count)] = {C::QKV_ROWS, C::H,     2 * C::I, one_stage ? 0 : C::H, in_rows,
                                        out_rows,    one_stage ? C::I : 0, vocab};
  FakeWeights fw(C::L);
  for (int ctas : kCtaCounts) {
    SCOPED_TRACE("ctas " + std::to_string(ctas));
    std::vector<Schedule<C>> sched(static_cast<size_t>(ctas));
    for (int cta = 0; cta < ctas; ++cta) sched[size_t(cta)].init(cta, ctas, vocab, delta_mask, one_stage);
    // The one-stage MLP: down^T's rows are the units of the CTA's gate/up pairs, and they fit the
    // act region of its shared memory.
    if (one_stage)
      for (int cta = 0; cta < ctas; ++cta) {
        const Part &gu = sched[size_t(cta)].part[int(Mat::GateUp)], &dt = sched[size_t(cta)].part[int(Mat::DownT)];
        ASSERT_EQ(dt.row0, gu.row0 / 2) << "cta " << cta;
        ASSERT_EQ(dt.rows, gu.rows / 2) << "cta " << cta;
        ASSERT_LE(dt.rows, one_stage_units_per_cta(C::I, ctas)) << "cta " << cta;
        if (cta == 0) ASSERT_EQ(dt.rows, std::min(C::I, one_stage_units_per_cta(C::I, ctas)));
        ASSERT_LE(dt.rows, OneStageMlp<C>::kMaxUnits) << "cta " << cta;
      }

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

    // Chunk sequences: per token, the CTA's rows of each matrix of each layer in order (a DeltaNet
    // layer's in_proj and out_proj where an attention layer has qkv and o), then the LM head, twice over.
    for (int cta = 0; cta < ctas; ++cta) {
      const Schedule<C>& s = sched[size_t(cta)];
      int expect_per_token = s.part[int(Mat::Lm)].chunks;
      for (int l = 0; l < C::L; ++l) {
        ASSERT_EQ(s.is_delta(l), ((delta_mask >> l) & 1u) != 0) << "layer " << l;
        for (int i = 0; i < 4; ++i) expect_per_token += s.part[int(s.layer_mat(s.is_delta(l), i))].chunks;
      }
      ASSERT_EQ(s.per_token, expect_per_token);
      if (s.per_token == 0) continue;
      uint32_t idx = 0;
      for (int token = 0; token < 2; ++token) {
        for (int l = 0; l <= C::L; ++l) {
          for (int i = 0; i < (l < C::L ? 4 : 1); ++i) {
            const Mat m = l < C::L ? s.layer_mat(s.is_delta(l), i) : Mat::Lm;
            const Part& pt = s.part[int(m)];
            const uint16_t* base = l < C::L ? matrix_base(fw.layers[size_t(l)], m) : fw.p.lm_head;
            const size_t K = size_t(Schedule<C>::width(m));
            int row = pt.row0;
            for (int j = 0; j < pt.chunks; ++j, ++idx) {
              const Chunk ch = s.chunk(fw.p, idx);
              const int n = std::min(pt.chunk_rows, pt.row0 + pt.rows - row);
              ASSERT_EQ(ch.src, base + size_t(row) * K) << "token " << token << " layer " << l << " matrix " << int(m);
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

    // QkvReady: per group, the CTAs' counts add up to the target of one token (stage B / B' wait).
    for (int g = 0; g < C::KV_HEADS; ++g) {
      int sum = 0;
      for (int cta = 0; cta < ctas; ++cta) {
        const Part& pt = sched[size_t(cta)].part[int(Mat::Qkv)];
        sum += qkv_group_rows<C>(pt.row0, pt.rows, g);
      }
      ASSERT_EQ(sum, (C::kHybrid ? 2 * C::G + 2 : C::G + 2) * C::D) << "kv group " << g;
    }
    if constexpr (C::kHybrid) {
      int all = 0;
      for (int g = 0; g < C::NK; ++g) {
        int sum = 0;
        for (int cta = 0; cta < ctas; ++cta) {
          const Part& pt = sched[size_t(cta)].part[int(Mat::In)];
          sum += delta_group_rows<C>(pt.row0, pt.rows, g);
        }
        ASSERT_EQ(sum, delta_group_count<C>()) << "DeltaNet group " << g;
        all += sum;
      }
      ASSERT_EQ(all, C::IN_ROWS) << "every in_proj row belongs to exactly one group";
      ASSERT_EQ(C::DELTA_ITEMS * C::DELTA_COLS, C::VD) << "the stage B' items cover every value column once";
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
    // Who merges: stage C while at most merge_splits splits hold positions. As n grows through a
    // launch the answer may turn from stage C to the last split, never back (the counters' per-token
    // increments are the same either way, but a CTA's view must not flip-flop within a launch), and
    // the bounds mean what they say: 0 never, kMaxSplits always.
    for (int merge : {0, 1, 2, kMergeInOProjMaxSplits, kMaxSplits}) {
      bool was = true;
      for (int n = 1; n <= 40000; n += n < 2000 ? 1 : 97) {
        const bool now = merge_in_o_proj(n, splits, merge);
        ASSERT_EQ(now, attention_used_splits(n, splits) <= merge) << "n " << n;
        ASSERT_FALSE(now && !was) << "n " << n << ", merge_splits " << merge << ": back to stage C";
        was = now;
        if (merge == 0) {
          ASSERT_FALSE(now);
        }
        if (merge == kMaxSplits) {
          ASSERT_TRUE(now);
        }
      }
    }
    // The default on the H200's 16 splits of Qwen3-0.6B: stage C merges up to position 256.
    if (splits == 16) {
      EXPECT_TRUE(merge_in_o_proj(256, splits, kMergeInOProjMaxSplits));
      EXPECT_FALSE(merge_in_o_proj(257, splits, kMergeInOProjMaxSplits));
    }
    // AttnReady grows by kv_heads * splits per token: a full launch stays far below 2^31.
    EXPECT_LT(int64_t(kLaunchTokenCap) * C::GROUPS * splits, int64_t(1) << 31);

    // Token selection capacity (the runner refuses top-k otherwise; greedy needs none): Qwen3's
    // vocabulary at every CTA count; Qwen3.5's 248,320 ids on the sm_90 parts (64+ CTAs; the 16 / 17
    // CTA edges refuse top-k, filter_unsupported_reason).
    if (vocab <= kQwenVocab || ctas >= 64) {
      EXPECT_LE((vocab + ctas - 1) / ctas, kThreads * kSelPerThread) << "vocabulary slice";
    }
    EXPECT_LE(ctas * kMaxTopK, kThreads * kSelPerThread) << "candidates";
  }

  // Counter slots: distinct and inside the array.
  const CounterLayout lay{C::L, C::GROUPS};
  std::vector<int> used(size_t(lay.count()), 0);
  auto mark = [&](Counter c, int l, int g) {
    const int s = lay.slot(c, l, g);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, lay.count());
    ++used[size_t(s)];
    ASSERT_EQ(lay.word(c, l, g), s * kCounterStride);
  };
  for (int l = 0; l < C::L; ++l) {
    for (int g = 0; g < C::GROUPS; ++g) {
      mark(Counter::QkvReady, l, g);
      mark(Counter::AttnTicket, l, g);
    }
    for (Counter c : {Counter::AttnReady, Counter::ODone, Counter::MlpDone, Counter::DownDone}) mark(c, l, 0);
  }
  for (Counter c : {Counter::LmTicket, Counter::Step, Counter::Done, Counter::StopSeen}) mark(c, 0, 0);
  for (size_t i = 0; i < used.size(); ++i) EXPECT_EQ(used[i], 1) << "counter slot " << i;
}

TEST(MegakernelPlan, Qwen3_06b) {
  check_config<ConfigQwen3_06B>("qwen3-0.6b", kQwenVocab);
  check_config<ConfigQwen3_06B>("qwen3-0.6b", kQwenVocab, 0, true);
}
TEST(MegakernelPlan, Qwen3_17b) {
  check_config<ConfigQwen3_17B>("qwen3-1.7b", kQwenVocab);
  check_config<ConfigQwen3_17B>("qwen3-1.7b", kQwenVocab, 0, true);
}
TEST(MegakernelPlan, Qwen3_4b) {
  check_config<ConfigQwen3_4B>("qwen3-4b", kQwenVocab);
  check_config<ConfigQwen3_4B>("qwen3-4b", kQwenVocab, 0, true);
}
// The tiny test preset: small vocabularies leave CTAs without LM-head rows (and a vocabulary smaller
// than the CTA count leaves some with no rows of anything but qkv).
TEST(MegakernelPlan, TinyTest) {
  check_config<ConfigTinyTest>("tiny-test", 1000);
  check_config<ConfigTinyTest>("tiny-test small vocab", 50);
  check_config<ConfigTinyTest>("tiny-test", 1000, 0, true);
}

// Qwen3.5 hybrids: the published [DeltaNet x 3, attention] pattern, all DeltaNet, all attention.
constexpr int kQwen35Vocab = 248320;
TEST(MegakernelPlan, Qwen35_08b) {
  uint64_t published = 0;
  for (int l = 0; l < ConfigQwen35_08B::L; ++l)
    if (l % 4 != 3) published |= uint64_t(1) << l;
  check_config<ConfigQwen35_08B>("qwen3.5-0.8b", kQwen35Vocab, published);
  check_config<ConfigQwen35_08B>("qwen3.5-0.8b", kQwen35Vocab, published, true);
  check_config<ConfigQwen35_08B>("qwen3.5-0.8b all DeltaNet", kQwen35Vocab, (uint64_t(1) << 24) - 1);
  check_config<ConfigQwen35_08B>("qwen3.5-0.8b all attention", kQwen35Vocab, 0);
}
TEST(MegakernelPlan, TinyHybrids) {
  check_config<ConfigTinyHybrid>("tiny-hybrid", 1000, 0b01);
  check_config<ConfigTinyHybridGqa>("tiny-hybrid-gqa", 1000, 0b110);
  check_config<ConfigTinyHybridGqa>("tiny-hybrid-gqa", 1000, 0b110, true);
  check_config<ConfigTinyHybrid>("tiny-hybrid", 1000, 0b01, true);
  check_config<ConfigTinyHybridGqa>("tiny-hybrid-gqa small vocab", 50, 0b110);
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
  show("qwen3.5-0.8b", ConfigQwen35_08B::kSmemBytes, ConfigQwen35_08B::kBufBytes);
  show("tiny-hybrid", ConfigTinyHybrid::kSmemBytes, ConfigTinyHybrid::kBufBytes);
  show("tiny-hybrid-gqa", ConfigTinyHybridGqa::kSmemBytes, ConfigTinyHybridGqa::kBufBytes);
}

}  // namespace
}  // namespace megaqwen::cuda::mk
