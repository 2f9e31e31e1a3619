// The last stage of a token: final RMSNorm redundantly, this CTA's slice of the LM head with the
// per-CTA best (value, id), then the token selection by the last CTA to arrive.
//   in:      x[L] (H floats; one-stage MLP: xmid[L - 1] + its sum), final_norm; weights lm_head rows [row0, row0 + rows), ceil(V / ctas) rows
//            per CTA (0.6B on 132 CTAs: 1,152 rows = 2.36 MB in 36 chunks of 32 rows; the last CTA 1,024)
//   out:     argmax and nucleus modes: best_v[cta], best_i[cta]; filtered and nucleus modes:
//            sel_vals[row] for its rows; filtered mode: its top-k candidates cand_v / cand_i / cand_n
//            (select.cuh); logits_out[t, row] when the tests ask for the raw logits; the selecting
//            CTA: tokens[t], counts[token] += 1 (penalties), with logprobs (lp_records set) its
//            record lp_records[t] (logprob.cuh: every CTA writes the raw logits and its parts first),
//            Done when the run ends (eos id, budget, host stop request), Step, then the host mailbox
//            slot (and `finished`)
//   bytes:   V * H * 2 per token over all CTAs (0.6B: 311 MB, a quarter of the token's bytes)
//   waits:   DownDone[L - 1] >= ctas * (t + 1); flagged vectors: polls x[L]'s words for the token's epoch
//            (with the one-stage MLP too: DownDone)
//   signals: LmTicket += 1 (acq_rel ticket) from every CTA; the last (ticket == ctas * (t + 1) - 1)
//            stores Step = t + 1 (release): every CTA's next token starts on it
// CTA 0 reads the host's stop request (mapped memory, a PCIe round trip) before it waits, so the read
// is off the critical path, and publishes it as StopSeen before it takes its ticket.
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"
#include "megaqwen/cuda/megakernel/logprob.cuh"

namespace megaqwen::cuda::mk {

template <class C>
__device__ bool is_stop_token(const Ctx<C>& c, int token) {
  for (int e = 0; e < c.p.n_eos; ++e)
    if (c.p.eos[e] == token) return true;
  return false;
}

template <class C>
__device__ void stage_lm_head(Ctx<C>& c) {
  // The raw logits are kept for the tests (logits_out) or the log-probabilities (lp_raw).
  const bool logprobs = c.p.lp_records != nullptr;
  float* logits = c.p.logits_out ? c.p.logits_out + size_t(c.t) * size_t(c.p.vocab) : logprobs ? c.p.lp_raw : nullptr;
  {
    StageTimer timer(c.p.timing, c.cta, Stage::LmHead, &c.stream.weight_wait_ns);
    if (c.cta == 0 && threadIdx.x == 0 && c.p.mailbox->stop) __stcg(reinterpret_cast<int*>(c.counter(Counter::StopSeen)), 1);
    if (c.x_flagged()) {
      load_flagged_vec<C::H>(c.p.x_words + size_t(C::L) * C::H, c.epoch(), c.vec);  // polling it is the wait
      timer.waited();
      rms_norm_to_smem<C::H>([&](int i) { return c.vec[i]; }, c.p.final_norm, c.p.eps, c.vec, c.red);
    } else {
      c.wait_input(c.counter(Counter::DownDone, C::L - 1), c.all_ctas());
      timer.waited();
      rms_norm_to_smem<C::H>([&](int i) { return c.residual(C::L, i); }, c.p.final_norm, c.p.eps, c.vec, c.red);
    }
    const SelectRule rule{c.p.temperature, c.p.gumbel, c.p.seed, c.p.step0 + uint64_t(c.t), c.p.counts,
                          c.p.repetition_penalty, c.p.presence_penalty, c.p.frequency_penalty};
    const bool filtered = c.p.top_k > 0, keep_vals = filtered || c.p.nucleus;
    float bv = -INFINITY;
    int bi = INT_MAX;
    auto consider = [&](int row, float a) {
      if (logits) __stcg(logits + row, a);
      const float v = select_value(rule, a, row);
      if (keep_vals) __stcg(c.p.sel_vals + row, v);
      if (!filtered && better_pair(v, row, bv, bi)) bv = v, bi = row;
    };
    stream_rows<C::H>(c, Mat::Lm, c.vec, [&](int row, float a0, float a1, bool has1) {
      consider(row, a0);
      if (has1) consider(row + 1, a1);
    });
    if (filtered) {
      // The normalized x in c.vec is no longer read: the selection scratch takes its place.
      __syncthreads();
      const Part& pt = c.part(Mat::Lm);
      cta_top_k(c.p.sel_vals, pt.row0, pt.row0 + pt.rows, c.p.top_k, c.cta, c.p.cand_v, c.p.cand_i, c.p.cand_n,
                reinterpret_cast<SelectShared*>(c.vec)->topk);
    } else {
      block_best(bv, bi, c.red);
      if (threadIdx.x == 0) {
        __stcg(c.p.best_v + c.cta, bv);
        __stcg(c.p.best_i + c.cta, bi);
      }
    }
    if (logprobs) {
      const Part& pt = c.part(Mat::Lm);
      cta_logprob_part_call(logits, pt.row0, pt.row0 + pt.rows, c.p.logprob_top, c.cta, c.p.lp_parts, c.red,
                            reinterpret_cast<SelectShared*>(c.vec)->topk);
    }
  }

  StageTimer timer(c.p.timing, c.cta, Stage::Select, &c.stream.weight_wait_ns);
  __syncthreads();
  if (threadIdx.x == 0) c.flags[0] = take_ticket(c.counter(Counter::LmTicket), c.p.ablate) == c.all_ctas() - 1u;
  c.stream.flush();  // the LM head's last refill (the next token's first weights), after the ticket
  __syncthreads();
  if (!c.flags[0]) return;
  int id;
  if (c.p.top_k > 0) {
    const FilterRule f{c.p.top_k, c.p.top_p, c.p.min_p, c.p.seed, c.p.step0 + uint64_t(c.t)};
    id = merge_and_draw(c.p.cand_v, c.p.cand_i, c.p.cand_n, c.ctas, f, reinterpret_cast<SelectShared*>(c.vec)->topk);
  } else if (c.p.nucleus) {
    // The member buffer takes the rest of the vector region (0.6B: ~750 members).
    constexpr int kMembers = int((size_t(C::kScratchFloats) * 4 - sizeof(SelectShared)) / sizeof(NucleusMember));
    static_assert(kMembers >= 256, "the nucleus member buffer is too small to be worth having");
    auto* members = reinterpret_cast<NucleusMember*>(reinterpret_cast<uint8_t*>(c.vec) + sizeof(SelectShared));
    const NucleusRule r{c.p.top_p, c.p.min_p, c.p.seed, c.p.step0 + uint64_t(c.t)};
    id = merge_and_draw_nucleus(c.p.best_v, c.p.best_i, c.ctas, c.p.sel_vals, c.p.vocab, r, c.red,
                                *reinterpret_cast<SelectShared*>(c.vec), members, kMembers);
  } else {
    float v;
    merge_best(c.p.best_v, c.p.best_i, c.ctas, v, id, c.red);  // thread 0's
  }
  if (logprobs) {
    // Every thread writes its part of the record; the fences wait until after the Step release.
    __syncthreads();
    if (threadIdx.x == 0) c.flags[3] = id == INT_MAX ? 0 : id;
    __syncthreads();
    float* log_z = c.red + 63;  // block_lse uses red[0, 48) at most
    score_token_call(logits, c.flags[3], c.p.logprob_top, c.p.vocab, c.ctas, c.p.lp_parts, c.red, log_z,
                     reinterpret_cast<SelectShared*>(c.vec)->topk, c.p.lp_records + c.t);
  }
  const int token = id == INT_MAX ? 0 : id;  // thread 0's (the others' too, but in argmax mode)
  bool stop = false;
  if (threadIdx.x == 0) {
    __stcg(c.p.tokens + c.t, token);
    if (c.p.counts) atomicAdd(c.p.counts + token, 1);  // the next step's penalties see it (Step release)
    stop = is_stop_token(c, token) || c.t + 1 >= c.p.max_tokens ||
           __ldcg(reinterpret_cast<const int*>(c.counter(Counter::StopSeen))) != 0;
    if (stop) __stcg(reinterpret_cast<int*>(c.counter(Counter::Done)), 1);
    if (c.p.ablate & kAblateFences) __threadfence();
    st_release(c.counter(Counter::Step), uint32_t(c.t + 1));  // the other CTAs go on from here
  }
  if (logprobs) {
    // The record's stores reach the host before the slot that makes it valid.
    if (threadIdx.x < kMaxLogprobTop) __threadfence_system();
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    // The host's copy, off the critical path: one store per slot (layout.h, Mailbox).
    Mailbox* mb = c.p.mailbox;
    mb->tokens[c.t] = token;
    if (stop) {
      __threadfence_system();  // this slot before `finished` (earlier slots: the host waits for the kernel)
      mb->finished = 1;
    }
  }
}

}  // namespace megaqwen::cuda::mk
