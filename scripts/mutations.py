"""The deliberate bugs of scripts/mutate: each one a small, plausible mistake that some test must
catch. A mutation replaces `original`, which must occur exactly once in `file`, by `mutant`.

When the code moves (the engine is being redesigned), re-target a mutation by updating its file and
snippets to the new place of the same mistake; `scripts/mutate --list` reports every snippet that
no longer matches exactly once. Keep each mutation one idea, and give the reason it matters in
`what` (it becomes the description column of the report).
"""

from collections import namedtuple

Mutation = namedtuple("Mutation", "id file original mutant what")

MUTATIONS = [
    # ---- sampler ---------------------------------------------------------------------------------
    Mutation("sampler-temperature", "src/engine/sampler.cpp",
             "- max) / cfg.temperature);", "- max) * cfg.temperature);",
             "temperature multiplies the logits instead of dividing them"),
    Mutation("sampler-top-p-cut", "src/engine/sampler.cpp",
             "      cumulative += probs[cut++];\n"
             "      if (cumulative >= cfg.top_p * total) break;",
             "      if (cumulative + probs[cut] >= cfg.top_p * total) break;\n"
             "      cumulative += probs[cut++];",
             "top-p leaves out the token that crosses p (the nucleus is one token short)"),
    Mutation("sampler-min-p", "src/engine/sampler.cpp",
             "const double floor = cfg.min_p * probs[0];",
             "const double floor = cfg.min_p * total;",
             "min-p is relative to the total mass instead of the most likely token"),
    Mutation("sampler-top-k", "src/engine/sampler.cpp",
             "keep = static_cast<size_t>(cfg.top_k);",
             "keep = static_cast<size_t>(cfg.top_k) + 1;",
             "top-k keeps one candidate too many"),
    Mutation("sampler-penalty-direction", "src/engine/sampler.cpp",
             "l = l > 0.0f ? l / cfg.repetition_penalty : l * cfg.repetition_penalty;",
             "l = l > 0.0f ? l * cfg.repetition_penalty : l / cfg.repetition_penalty;",
             "the repetition penalty favours repeated tokens instead of penalizing them"),
    Mutation("decode-logprob-after-penalty", "src/engine/decode.cpp",
             "static_cast<float>(raw[token] - cpu::log_sum_exp(raw, vocab))",
             "static_cast<float>(row[token] - cpu::log_sum_exp(row.data(), vocab))",
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
             "static_cast<int>(exp) - 25);", "static_cast<int>(exp) - 24);",
             "f16 -> f32 widening doubles every normal value (exponent bias off by one)"),
    # ---- RoPE ------------------------------------------------------------------------------------
    Mutation("rope-sin-sign", "src/cpu/rope.cpp",
             "v[i] = a * c[i] - b * s[i];", "v[i] = a * c[i] + b * s[i];",
             "RoPE rotates the first half with the wrong sign of sin"),
    Mutation("rope-theta-exponent", "src/cpu/rope.cpp",
             "-2.0 * i / head_dim);", "-2.0 * i / half);",
             "RoPE frequencies theta^(-2i/d) use d/2 in the exponent"),
    Mutation("rope-positions-restart", "src/engine/stack.cpp",
             "s.positions[r++] = seg.cache->len + i;", "s.positions[r++] = i;",
             "RoPE positions restart at 0 in every call instead of continuing the KV cache"),
    # ---- chunkers --------------------------------------------------------------------------------
    Mutation("concat-order", "src/engine/photon_ops.cpp",
             "      std::memcpy(s.x.data() + row * d, j.children, n * sizeof(float));",
             "      const int child = width / lc.chunk_len;\n"
             "      for (size_t k = 0; k < n; ++k)  // the unit's children in reverse order\n"
             "        s.x[row * d + k] =\n"
             "            j.children[k / width * width + (lc.chunk_len - 1 - k % width / child) * "
             "child + k % child];",
             "the concat chunker joins a unit's children in reverse order"),
    Mutation("linear-chunker-norm", "src/engine/photon_ops.cpp",
             "cpu::rmsnorm(j.children, lw.chunker_norm, s.chunk.data(), j.units, width, "
             "c.norm_eps);",
             "cpu::rmsnorm(j.children, lw.chunker_norm, s.chunk.data(), j.units * lc.chunk_len,\n"
             "                   width / lc.chunk_len, c.norm_eps);",
             "the linear chunker normalizes each child instead of the whole concatenation"),
    Mutation("hiergen-pending-order", "src/engine/hier_state.cpp",
             "std::memcpy(lv.pending.data() + static_cast<size_t>(lv.n_pending) * dp, "
             "latent[i].data(),",
             "std::memcpy(lv.pending.data() + static_cast<size_t>(cl - 1 - lv.n_pending) * dp,\n"
             "                  latent[i].data(),",
             "HierGen steps store a unit's completed children in reverse order"),
    # ---- window positions ------------------------------------------------------------------------
    Mutation("score-pass-unit-offset", "src/engine/photon_ops.cpp",
             "        const int64_t u = u0 + i;\n", "        const int64_t u = i;\n",
             "scoring windows beyond the first pass of 256 take the first pass's conditioners"),
    Mutation("score-pass-output-offset", "src/engine/photon_ops.cpp",
             "std::memcpy(below.data() + (u0 + i) * cl * e, windows[i].outputs.data(),",
             "std::memcpy(below.data() + i * cl * e, windows[i].outputs.data(),",
             "scoring window outputs beyond the first pass overwrite the first pass's rows"),
    Mutation("score-output-row-offset", "src/engine/photon_ops.cpp",
             "token_logprobs(model, cond.data() + c.token_dim, tokens.subspan(1), out + 1, s);",
             "token_logprobs(model, cond.data(), tokens.subspan(1), out + 1, s);",
             "PHOTON scoring reads each token's logits from the previous position's output"),
    Mutation("logprob-block-token", "src/engine/photon_ops.cpp",
             "out[r0 + i] = static_cast<float>(row[tokens[r0 + i]]",
             "out[r0 + i] = static_cast<float>(row[tokens[i]]",
             "scoring's LM-head blocks beyond the first 64 rows read the first block's tokens"),
    Mutation("window-output-slot", "src/engine/photon_ops.cpp",
             "std::memcpy(w.outputs.data() + static_cast<size_t>(w.n_outputs) * e,",
             "std::memcpy(w.outputs.data(),",
             "a window's new outputs overwrite its first outputs instead of following them"),
    # ---- prefill, HierGen ------------------------------------------------------------------------
    Mutation("hiergen-prefill-slice", "src/engine/session.cpp",
             "hier_append(model_, state_, slice, history_, scratch_);",
             "hier_append(model_, state_, tokens.first(slice.size()), history_, scratch_);",
             "HierGen prefill slices after the first 512 tokens re-read the first slice"),
    Mutation("recgen-prefill-slice", "src/engine/recgen_session.cpp",
             "hier_append(model_, st, all.subspan(at, end - at), all.first(end), scratch_);",
             "hier_append(model_, st, all.first(end - at), all.first(end), scratch_);",
             "RecGen prefill slices after the first 512 tokens re-read the first slice"),
    Mutation("hiergen-reopen-level", "src/engine/hier_state.cpp",
             "if (changed[i] - 1 < l) continue;", "if (changed[i] < l) continue;",
             "a HierGen step also reopens the window of the level that was just fed"),
    # ---- RecGen ----------------------------------------------------------------------------------
    Mutation("recgen-child-index", "src/engine/recgen_session.cpp",
             "return (pos / c.block_tokens(level)) % c.level(level + 1).chunk_len;",
             "return (pos / c.block_tokens(level) + 1) % c.level(level + 1).chunk_len;",
             "RecGen conditions a level's plan on the parent plan's next child (off by one)"),
    Mutation("recgen-plan-conditioner", "src/engine/recgen_session.cpp",
             "conds.push_back(l == L ? r->top_last_.data()",
             "conds.push_back(l == L ? model.weights().start",
             "RecGen's new top-level plans take the start vector instead of the last X(L)"),
    Mutation("recgen-plan-children", "src/engine/recgen_session.cpp",
             "std::memcpy(row, windows[i].output(j), dp * sizeof(float));",
             "std::memcpy(row, windows[i].output(0), dp * sizeof(float));",
             "RecGen plans give every generated child the window's first output"),
    # ---- KV cache --------------------------------------------------------------------------------
    Mutation("kv-attention-start", "src/engine/stack.cpp",
             "s.attention.push_back({row, seg.rows, cache.len, cache.k_at(layer, 0), "
             "cache.v_at(layer, 0)});",
             "s.attention.push_back({row, seg.rows, cache.len > 0 ? cache.len - 1 : 0,\n"
             "                           cache.k_at(layer, 0), cache.v_at(layer, 0)});",
             "rows continuing a KV cache attend to one key too few"),
    Mutation("kv-layer-stride", "src/engine/kv_cache.h",
             "return k.data() + (static_cast<size_t>(layer) * capacity + pos) * kv_dim;",
             "return k.data() + (static_cast<size_t>(layer) * len + pos) * kv_dim;",
             "the K cache's layers are laid out by filled length instead of capacity"),
    # ---- session state ---------------------------------------------------------------------------
    Mutation("state-seed-not-restored", "src/engine/session_state.cpp",
             "  c.seed = in->seed();\n", "",
             "a restored session forgets its sampler seed"),
    Mutation("state-pending-not-restored", "src/engine/session_state.cpp",
             "      lv.n_pending = n_pending;\n", "",
             "a restored HierGen session forgets the open units' pending children"),
    # ---- tokenizer streaming ---------------------------------------------------------------------
    Mutation("utf8-stream-splits", "src/tokenizer/tokenizer.cpp",
             "if (length < 0) break;                 // wait for the rest of the character",
             "if (length < 0) {\n      complete = pending_.size();\n      break;\n    }",
             "the UTF-8 stream emits a character's first bytes without waiting for the rest"),
    Mutation("utf8-invalid-passes", "src/tokenizer/tokenizer.cpp",
             '      out.append("\\xEF\\xBF\\xBD");', "      out.append(bytes.substr(at, 1));",
             "invalid bytes are streamed as they are instead of as U+FFFD"),
]
