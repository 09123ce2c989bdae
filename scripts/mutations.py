"""The deliberate bugs of scripts/mutate: each one a small, plausible mistake that some test must
catch. A mutation replaces `original`, which must occur exactly once in `file`, by `mutant`.

When the code moves, re-target a mutation by updating its file and
snippets to the new place of the same mistake; `scripts/mutate --list` reports every snippet that
no longer matches exactly once. Keep each mutation one idea, and give the reason it matters in
`what` (it becomes the description column of the report).
"""

from collections import namedtuple

Mutation = namedtuple("Mutation", "id file original mutant what")

MUTATIONS = [
    # ---- sampler (the CPU backend's, the reference of every backend) -----------------------------
    Mutation("sampler-temperature", "src/backend/cpu/sample.cpp",
             "- max) / cfg.temperature);", "- max) * cfg.temperature);",
             "temperature multiplies the logits instead of dividing them"),
    Mutation("sampler-top-p-cut", "src/backend/cpu/sample.cpp",
             "      cumulative += probs[cut++];\n"
             "      if (cumulative >= cfg.top_p * total) break;",
             "      if (cumulative + probs[cut] >= cfg.top_p * total) break;\n"
             "      cumulative += probs[cut++];",
             "top-p leaves out the token that crosses p (the nucleus is one token short)"),
    Mutation("sampler-min-p", "src/backend/cpu/sample.cpp",
             "const double floor = cfg.min_p * probs[0];",
             "const double floor = cfg.min_p * total;",
             "min-p is relative to the total mass instead of the most likely token"),
    Mutation("sampler-top-k", "src/backend/cpu/sample.cpp",
             "keep = static_cast<size_t>(cfg.top_k);",
             "keep = static_cast<size_t>(cfg.top_k) + 1;",
             "top-k keeps one candidate too many"),
    Mutation("sampler-penalty-direction", "src/backend/cpu/sample.cpp",
             "l = l > 0.0f ? l / cfg.repetition_penalty : l * cfg.repetition_penalty;",
             "l = l > 0.0f ? l * cfg.repetition_penalty : l / cfg.repetition_penalty;",
             "the repetition penalty favours repeated tokens instead of penalizing them"),
    Mutation("decode-logprob-after-penalty", "src/backend/cpu/cpu_backend.cpp",
             "static_cast<float>(raw[tokens[i]] - log_sum_exp(raw, vocab))",
             "static_cast<float>(row[tokens[i]] - log_sum_exp(row.data(), vocab))",
             "reported log-probabilities come from the penalized logits, not the model's"),
    # ---- dtypes ----------------------------------------------------------------------------------
    Mutation("f16-round-truncates", "src/core/dtype.cpp",
             "uint32_t m = abs + 0xc8000fffu + ((abs >> 13) & 1u);",
             "uint32_t m = abs + 0xc8000000u;",
             "f32 -> f16 truncates instead of rounding to nearest even"),
    Mutation("bf16-round-truncates", "src/core/dtype.h",
             "  bits += 0x7fffu + ((bits >> 16) & 1u);\n", "",
             "f32 -> bf16 truncates instead of rounding to nearest even"),
    Mutation("f16-widen-exponent", "src/core/dtype.cpp",
             "value *= 0x1p112f;", "value *= 0x1p113f;",
             "f16 -> f32 widening doubles every finite value (exponent bias off by one)"),
    # ---- RoPE ------------------------------------------------------------------------------------
    Mutation("rope-sin-sign", "src/backend/cpu/rope.cpp",
             "v[i] = a * c[i] - b * s[i];", "v[i] = a * c[i] + b * s[i];",
             "RoPE rotates the first half with the wrong sign of sin"),
    Mutation("rope-theta-exponent", "src/backend/cpu/rope.cpp",
             "-2.0 * i / head_dim);", "-2.0 * i / half);",
             "RoPE frequencies theta^(-2i/d) use d/2 in the exponent"),
    Mutation("rope-positions-restart", "src/engine/stack.cpp",
             "positions.push_back(seg.cache->len + i);", "positions.push_back(i);",
             "RoPE positions restart at 0 in every call instead of continuing the KV cache"),
    # ---- chunkers --------------------------------------------------------------------------------
    Mutation("concat-order", "src/engine/levels.cpp",
             "      copies.push_back({x.slice(row, j.units), a});",
             "      const int64_t child = width / lc.chunk_len;  // the children in reverse order\n"
             "      for (int64_t u = 0; u < j.units; ++u)\n"
             "        for (int k = 0; k < lc.chunk_len; ++k)\n"
             "          copies.push_back({x.row(row + u).view(lc.chunk_len, child).row(k),\n"
             "                            j.children.row(u * lc.chunk_len + lc.chunk_len - 1 - k)});",
             "the concat chunker joins a unit's children in reverse order"),
    Mutation("linear-chunker-norm", "src/engine/levels.cpp",
             "b.rmsnorm(a, lw.chunker_norm, chunk, c.norm_eps);",
             "b.rmsnorm(j.children, lw.chunker_norm,\n"
             "                chunk.view(j.units * lc.chunk_len, width / lc.chunk_len), c.norm_eps);",
             "the linear chunker normalizes each child instead of the whole concatenation"),
    Mutation("hiergen-pending-order", "src/engine/hiergen.cpp",
             "copies.push_back({lv.pending.row(lv.n_pending), latent.row(static_cast<int64_t>(a))});",
             "copies.push_back(\n"
             "          {lv.pending.row(cl - 1 - lv.n_pending), latent.row(static_cast<int64_t>(a))});",
             "HierGen steps store a unit's completed children in reverse order"),
    # ---- window positions ------------------------------------------------------------------------
    Mutation("score-pass-unit-offset", "src/engine/score.cpp",
             "const int64_t u = u0 + i, first = u * cl;", "const int64_t u = i, first = u * cl;",
             "scoring windows beyond the first pass of 256 take the first pass's conditioners"),
    Mutation("score-pass-output-offset", "src/engine/score.cpp",
             "{below.slice((u0 + i) * cl, windows[i].n_outputs),",
             "{below.slice(i * cl, windows[i].n_outputs),",
             "scoring window outputs beyond the first pass overwrite the first pass's rows"),
    Mutation("score-output-row-offset", "src/engine/score.cpp",
             "token_logprobs(model, cond.slice(1, t - 1), tokens.subspan(1),",
             "token_logprobs(model, cond.slice(0, t - 1), tokens.subspan(1),",
             "PHOTON scoring reads each token's logits from the previous position's output"),
    Mutation("logprob-block-token", "src/engine/levels.cpp",
             "b.logprobs(block, tokens.subspan(r0, n), out + r0);",
             "b.logprobs(block, tokens.subspan(0, n), out + r0);",
             "scoring's LM-head blocks beyond the first 64 rows read the first block's tokens"),
    Mutation("window-output-slot", "src/engine/levels.cpp",
             "{w.outputs.slice(w.n_outputs, produced), x.slice(row + n - produced, produced)}",
             "{w.outputs.slice(0, produced), x.slice(row + n - produced, produced)}",
             "a window's new outputs overwrite its first outputs instead of following them"),
    # ---- prefill, HierGen ------------------------------------------------------------------------
    Mutation("hiergen-prefill-slice", "src/engine/hiergen.cpp",
             "const AppendJob job{&st, slice, s.history};",
             "const AppendJob job{&st, tokens.first(slice.size()), s.history};",
             "HierGen prefill slices after the first 512 tokens re-read the first slice"),
    Mutation("recgen-prefill-slice", "src/engine/recgen.cpp",
             "jobs.push_back({&states[i], slice, whole[i].first(end)});",
             "jobs.push_back({&states[i], whole[i].first(slice.size()), whole[i].first(end)});",
             "RecGen prefill slices after the first 512 tokens re-read the first slice"),
    Mutation("hiergen-reopen-level", "src/engine/hiergen.cpp",
             "if (changed[i] - 1 < l) continue;", "if (changed[i] < l) continue;",
             "a HierGen step also reopens the window of the level that was just fed"),
    # ---- RecGen ----------------------------------------------------------------------------------
    Mutation("recgen-child-index", "src/engine/recgen_plan.cpp",
             "return (pos / c.block_tokens(level)) % c.level(level + 1).chunk_len;",
             "return (pos / c.block_tokens(level) + 1) % c.level(level + 1).chunk_len;",
             "RecGen conditions a level's plan on the parent plan's next child (off by one)"),
    Mutation("recgen-plan-conditioner", "src/engine/recgen_plan.cpp",
             "conds.push_back(l == L ? r->top_last.tensor()",
             "conds.push_back(l == L ? model.weights().start",
             "RecGen's new top-level plans take the start vector instead of the last X(L)"),
    Mutation("recgen-plan-children", "src/engine/recgen_plan.cpp",
             "copies.push_back({row, windows[i].output(j)});",
             "copies.push_back({row, windows[i].output(0)});",
             "RecGen plans give every generated child the window's first output"),
    Mutation("recgen-continuation-output", "src/engine/recgen_continue.cpp",
             "rows.push_back({hidden.row(i), r.group[offset / c1].output(offset % c1)});",
             "rows.push_back({hidden.row(i), r.group[offset / c1].latest()});",
             "a RecGen continuation scores every token of a unit with the unit's last output"),
    Mutation("recgen-continuation-reencodes", "src/engine/recgen.cpp",
             "    if (r.generated) return continue_with(model_, s, tokens, logprobs, scratch_);\n", "",
             "a RecGen session re-encodes known tokens after generation as if they were prompt"),
    # ---- KV cache --------------------------------------------------------------------------------
    Mutation("kv-attention-start", "src/engine/stack.cpp",
             "attention[i] = {row, segments[i].rows, cache.len, cache.k_layer(layer),",
             "attention[i] = {row, segments[i].rows, cache.len > 0 ? cache.len - 1 : 0,\n"
             "                      cache.k_layer(layer),",
             "rows continuing a KV cache take the position of the cache's last row"),
    Mutation("kv-layer-stride", "src/engine/kv_cache.h",
             "return k.slice(static_cast<int64_t>(layer) * capacity, capacity);",
             "return k.slice(static_cast<int64_t>(layer) * len, capacity);",
             "the K cache's layers are laid out by filled length instead of capacity"),
    # ---- CPU attention and products (long rows' key blocks, groups of products) -----------------
    Mutation("attention-block-rescale", "src/backend/cpu/attention.cpp",
             "const float scale = std::exp(p[h] - max);", "const float scale = 1.0f;",
             "a long row's key blocks are summed without rescaling to their common maximum"),
    Mutation("attention-block-last-key", "src/backend/cpu/attention.cpp",
             "std::min<long>(kKeyBlock, keys - j0)", "std::min<long>(kKeyBlock, keys - j0 - 1)",
             "a long row's last key block leaves out the row's own key"),
    Mutation("linear-group-item", "src/backend/cpu/linear.cpp",
             "const long c = item - first[i];", "const long c = item - first[0];",
             "the work items of a group's later products compute the wrong outputs"),
    Mutation("blocked-columns-into-y", "src/backend/cpu/skinny_gemm_tiles.h",
             "          if (k0 == 0)\n"
             "            T::zero(t);\n"
             "          else\n"
             "            T::copy(saved[g], t);\n",
             "          T::zero(t);\n"
             "          if (k1 < whole) {\n"
             "            T::steps(t, x, a.in, wg, k0, k1, nullptr, 1);\n"
             "            T::finish(t, x, a.in, wg, a.in, y + g * WB, a.ldy, a.accumulate || k0 > 0);\n"
             "            continue;\n"
             "          }\n"
             "          if (k0 > 0) {\n"
             "            T::steps(t, x, a.in, wg, k0, k1, nullptr, 1);\n"
             "            T::finish(t, x, a.in, wg, whole, y + g * WB, a.ldy, true);\n"
             "            continue;\n"
             "          }\n",
             "the blocked loops (many rows) add each block of columns into y, as a GEMM's k-blocking "
             "does, instead of carrying the partial sums: a row's bits depend on the rows beside it"),
    # ---- 16-bit KV caches ------------------------------------------------------------------------
    Mutation("kv-type-ignored", "src/engine/session.cpp",
             "new Session(model, mode, context, sampler, kv_type)",
             "new Session(model, mode, context, sampler, DType::F32)",
             "sessions keep f32 caches whatever kv type they ask for"),
    Mutation("state-kv-type-not-saved", "src/engine/session_state.cpp",
             "static_cast<fb::KvType>(s.kv_type)", "fb::KvType::F32",
             "a saved state says f32 whatever its caches hold"),
    Mutation("attention-f16-as-bf16", "src/backend/cpu/attention.cpp",
             "widen_to_f32(type, ", "widen_to_f32(DType::BF16, ",
             "attention reads every 16-bit cache row as bf16, f16 ones too"),
    # ---- session state ---------------------------------------------------------------------------
    Mutation("state-seed-not-restored", "src/engine/session_state.cpp",
             "  c.seed = in->seed();\n", "",
             "a restored session forgets its sampler seed"),
    Mutation("state-pending-not-restored", "src/engine/hiergen.cpp",
             "      lv.n_pending = n_pending;\n", "",
             "a restored HierGen session forgets the open units' pending children"),
    # ---- stop rules and cancellation (photon.h, before photon_session_generate) ------------------
    Mutation("stop-string-within-piece", "src/engine/decode.cpp",
             "const size_t from = new_from >= stop.size() ? new_from - stop.size() + 1 : 0;",
             "const size_t from = new_from;",
             "a stop string is looked for only inside the newest piece, not across pieces"),
    Mutation("stop-text-per-call", "src/engine/decode.cpp",
             "    s->stream.string_stop_owed = false;\n",
             "    s->stream.string_stop_owed = false;\n    s->stream.recent.clear();\n",
             "each generate call matches stop strings only in its own text"),
    Mutation("eos-delivered", "src/engine/decode.cpp",
             "      t.reason = PHOTON_STOP_EOS;  // EOS stays ahead: asking again stops again\n"
             "      break;\n",
             "      t.reason = PHOTON_STOP_EOS;\n",
             "EOS is delivered and added to the history before the call stops"),
    Mutation("stop-reason-not-reset", "src/engine/decode.cpp",
             "      t.session->stream.stop_reason = t.reason;",
             "      if (t.reason != PHOTON_STOP_NONE) t.session->stream.stop_reason = t.reason;",
             "a pull that returns a token leaves the previous stop reason in place"),
    Mutation("string-stop-not-owed", "src/engine/decode.cpp",
             "    st.string_stop_owed = reason == PHOTON_STOP_STRING;\n", "",
             "a pull loop goes on past a stop string (the next pull does not return -1)"),
    Mutation("prefill-keeps-stop-text", "src/engine/session.cpp",
             "    s->stream.recent.clear();\n", "",
             "a prefill does not restart the generated text: a stop string may span a prompt"),
    Mutation("pull-clears-cancel", "src/engine/decode.cpp",
             "    require_decodable(session, who, std::nullopt);\n",
             "    require_decodable(session, who, std::nullopt);\n"
             "    session.cancel_requested.store(false);\n",
             "every pull clears a cancellation on entry, so cancel() never reaches a pull loop"),
    Mutation("cancel-not-answered", "src/engine/decode.cpp",
             "if (!t.session->cancel_requested.exchange(false)) return false;",
             "if (!t.session->cancel_requested.load()) return false;",
             "the call a cancellation stops leaves it pending: every later pull stops too"),
    Mutation("cancel-after-ahead", "src/engine/decode.cpp",
             "    if (answers_cancel(t)) break;  // also between tokens sampled ahead\n", "",
             "a cancellation waits for the tokens RecGen sampled ahead to be delivered"),
    Mutation("context-full-early", "src/engine/decode.cpp",
             "  else if (next >= t.session->context && !shifts_context(*t.session))",
             "  else if (next + 1 >= t.session->context && !shifts_context(*t.session))",
             "generation stops one token before the context is full"),
    Mutation("context-full-late", "src/engine/decode.cpp",
             "  else if (next >= t.session->context && !shifts_context(*t.session))",
             "  else if (next > t.session->context && !shifts_context(*t.session))",
             "generation goes on at a full context (no lane is left to sample: the loop hangs)"),
    Mutation("state-stop-text-not-restored", "src/engine/session_state.cpp",
             "  if (st->recent_text()) s->stream.recent = st->recent_text()->str();\n", "",
             "a restored session forgets its generated text: a stop string begun before the "
             "save never completes"),
    Mutation("state-utf8-pending-not-restored", "src/engine/session_state.cpp",
             "    s->stream.utf8.set_pending(std::string(st->utf8_pending()->begin(), "
             "st->utf8_pending()->end()));\n", "",
             "a restored session drops the first bytes of a character split across the save"),
    # ---- tokenizer streaming ---------------------------------------------------------------------
    Mutation("utf8-stream-splits", "src/tokenizer/tokenizer.cpp",
             "if (length < 0) break;                 // wait for the rest of the character",
             "if (length < 0) {\n      complete = pending_.size();\n      break;\n    }",
             "the UTF-8 stream emits a character's first bytes without waiting for the rest"),
    Mutation("utf8-invalid-passes", "src/tokenizer/tokenizer.cpp",
             '      out.append("\\xEF\\xBF\\xBD");', "      out.append(bytes.substr(at, 1));",
             "invalid bytes are streamed as they are instead of as U+FFFD"),
]
