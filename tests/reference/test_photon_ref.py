#!/usr/bin/python3
"""Self-checks of the PyTorch reference (python/photon_ref) against the spec, independent of the
C++ engine: building blocks against their formulas written out element by element, the batched
teacher-forced pass against a per-position evaluation, and RecGen against a second, level-by-level
formulation of spec section 5, and RecGen scoring (score_recgen) against both that formulation and
the RecGen generator.

    PYTHONPATH=python /usr/bin/python3 tests/reference/test_photon_ref.py
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
from photon_ref import (generate_hiergen, generate_recgen, load_model, score,  # noqa: E402
                        score_recgen)
from photon_ref.model import Attention, StackConfig, rms_norm, rope  # noqa: E402
from photon_ref.random_weights import write_random_model  # noqa: E402


def stack(layers, heads, kv_heads, head_dim, ffn_dim):
    return {"layers": layers, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
            "ffn_dim": ffn_dim}


def photon_config(levels, embed_dim=8, token_dim=16):
    return {"arch": "photon", "vocab_size": 64, "embed_dim": embed_dim, "token_dim": token_dim,
            "max_seq_len": 128, "levels": levels}


# L = 3 with both chunkers, GQA, R = 1 and 2, and chunk lengths 2 and 3.
L3 = photon_config([
    {"chunk_len": 2, "chunker": "concat", "dim": 16, "prefix_len": 2,
     "encoder": stack(1, 2, 1, 4, 16), "decoder": stack(2, 4, 2, 4, 24)},
    {"chunk_len": 3, "chunker": "linear", "dim": 12, "prefix_len": 1,
     "encoder": stack(2, 2, 2, 6, 16), "decoder": stack(1, 2, 1, 6, 16)},
    {"chunk_len": 2, "chunker": "linear", "dim": 20, "prefix_len": 2,
     "encoder": stack(1, 4, 4, 4, 16), "decoder": stack(1, 2, 2, 4, 20)}])
L2 = photon_config([
    {"chunk_len": 3, "chunker": "linear", "dim": 12, "prefix_len": 1,
     "encoder": stack(1, 2, 1, 4, 16), "decoder": stack(1, 2, 2, 4, 16)},
    {"chunk_len": 2, "chunker": "concat", "dim": 24, "prefix_len": 2,
     "encoder": stack(2, 4, 2, 4, 24), "decoder": stack(2, 2, 1, 6, 16)}])


def load(config_json, seed):
    directory = tempfile.mkdtemp(prefix="photon_ref_test_")
    return load_model(*write_random_model(directory, config_json, seed))


def random_tokens(n, seed, vocab=64):
    rng = np.random.default_rng(seed)
    return [1] + [int(t) for t in rng.integers(3, vocab, size=n - 1)]


class BuildingBlocks(unittest.TestCase):
    def test_rms_norm(self):
        x = torch.tensor([[1.0, -2.0, 3.0, 0.5]], dtype=torch.float64)
        w = torch.tensor([0.5, 1.0, 2.0, -1.0], dtype=torch.float64)
        rms = math.sqrt((1 + 4 + 9 + 0.25) / 4 + 1e-5)
        expected = [1 / rms * 0.5, -2 / rms, 3 / rms * 2, -0.5 / rms]
        self.assertTrue(torch.allclose(rms_norm(x, w, 1e-5)[0],
                                       torch.tensor(expected, dtype=torch.float64)))

    def test_rope_rotates_pairs_i_and_i_plus_half(self):
        d_h, theta = 6, 10000.0
        x = torch.randn(5, 2, d_h, dtype=torch.float64)  # [n, heads, d_h]
        out = rope(x, theta)
        for p in range(5):
            for h in range(2):
                for i in range(d_h // 2):
                    angle = p * theta ** (-2 * i / d_h)
                    a, b = float(x[p, h, i]), float(x[p, h, i + d_h // 2])
                    self.assertAlmostEqual(float(out[p, h, i]),
                                           a * math.cos(angle) - b * math.sin(angle), places=12)
                    self.assertAlmostEqual(float(out[p, h, i + d_h // 2]),
                                           b * math.cos(angle) + a * math.sin(angle), places=12)

    def test_attention_matches_loops_with_grouped_kv_heads(self):
        torch.manual_seed(0)
        width, s = 10, StackConfig(1, 6, 2, 4, 8)  # query heads 0-2 use kv head 0, 3-5 kv head 1
        attn = Attention(width, s, 10000.0).double()
        for p in attn.parameters():
            torch.nn.init.normal_(p)
        x = torch.randn(7, width, dtype=torch.float64)
        q = rope((x @ attn.wq.T).reshape(7, 6, 4), 10000.0)
        k = rope((x @ attn.wk.T).reshape(7, 2, 4), 10000.0)
        v = (x @ attn.wv.T).reshape(7, 2, 4)
        heads = torch.zeros(7, 6, 4, dtype=torch.float64)
        for h in range(6):
            g = h // 3
            for i in range(7):
                w = torch.softmax(torch.stack([q[i, h] @ k[j, g] / 2.0 for j in range(i + 1)]), 0)
                heads[i, h] = sum(w[j] * v[j, g] for j in range(i + 1))
        expected = heads.reshape(7, 24) @ attn.wo.T
        self.assertTrue(torch.allclose(attn(x).detach(), expected.detach(), atol=1e-12))


def per_position_logits(model, tokens, p):
    """Distribution of tokens[p] (0-based) from tokens[:p] alone, spec 3.2-3.3 one unit at a time:
    the encoders over the complete units of tokens[:p], then conditioners top-down on demand."""
    cfg = model.config
    L = cfg.num_levels
    C = [None] + [cfg.level(l).chunk_len for l in range(1, L + 1)]
    known = tokens[:p]
    X = [[model.tok_emb_enc[t] for t in known]]
    for l in range(1, L + 1):
        enc = model.encoder(l)
        a = [enc.chunk(torch.cat(X[l - 1][m * C[l]:(m + 1) * C[l]]))
             for m in range(len(X[l - 1]) // C[l])]
        X.append(list(enc(torch.stack(a))) if a else [])

    def conditioner(l, u):  # 1-based unit u of level l
        if l == L:
            return model.decoder(L).start if u == 1 else X[L][u - 2]
        return output(l + 1, (u - 1) // C[l + 1] + 1, (u - 1) % C[l + 1] + 1)

    def output(l, u, j):  # o_j of the level-l window of unit u
        dec = model.decoder(l)
        prefix = dec.converter(conditioner(l, u)).reshape(dec.prefix_len, dec.width)
        children = range((u - 1) * C[l] + 1, (u - 1) * C[l] + j)  # u_1 .. u_{j-1}
        ys = [model.tok_emb_dec[tokens[c - 1]] if l == 1 else X[l - 1][c - 1] for c in children]
        window = torch.cat([prefix] + [y[None, :] for y in ys])
        return dec(window)[dec.prefix_len - 1 + (j - 1)]

    position = p + 1  # 1-based index of the predicted token
    return output(1, (position - 1) // C[1] + 1, (position - 1) % C[1] + 1) @ model.lm_head.T


def recgen_level_by_level(model, tokens, n_prompt):
    """RecGen written the other way round from photon_ref.generate: every unit of every level is
    decoded top-down, level by level, and the top encoder is stepped as each top unit completes.
    Returns the logits [len(tokens) + 1, V] of all positions (row p: distribution of tokens[p])."""
    cfg = model.config
    L, T = cfg.num_levels, len(tokens)
    C = [None] + [cfg.level(l).chunk_len for l in range(1, L + 1)]
    B = [cfg.block_tokens(l) for l in range(L + 1)]
    X = model.encode(tokens[:n_prompt])
    units = [T + 1]
    for l in range(1, L + 1):
        units.append(-(-units[l - 1] // C[l]))

    def window(l, z, inputs_of):
        dec = model.decoder(l)
        prefix = dec.prefix(z)
        ys, outs = [], []
        for j in range(C[l]):
            y = torch.stack(ys) if ys else prefix.new_zeros(0, dec.width)
            outs.append(dec(torch.cat([prefix, y]))[-1])
            ys.append(inputs_of(j, outs[-1]))
        return outs

    # Top level: unit u is conditioned on the encoder state of the previous unit, whose chunker
    # input are the latents of its children (prompt encoder states, or this window's outputs).
    top_inputs, latents = [], []  # latents: the level-(L-1) latents of all top units' children
    z = model.decoder(L).start
    recon = []  # recon[l]: Xhat(l) of every level-l unit, from the level-(l+1) windows
    for u in range(1, units[L] + 1):
        first = (u - 1) * C[L]

        def top_input(j, o, first=first):
            c = first + j + 1
            return X[L - 1][c - 1] if c * B[L - 1] <= n_prompt else o

        outs = window(L, z, top_input)
        recon.extend(outs)
        children = [top_input(j, outs[j]) for j in range(C[L])]
        latents.extend(children)
        top_inputs.append(model.encoder(L).chunk(torch.cat(children)))
        z = model.encoder(L)(torch.stack(top_inputs))[-1]  # the top encoder steps once
    conditioners = recon  # Xhat(L-1) of every level-(L-1) unit
    for l in range(L - 1, 1, -1):
        below = []
        for u in range(1, units[l] + 1):
            first = (u - 1) * C[l]

            def mid_input(j, o, first=first, l=l):
                c = first + j + 1
                return X[l - 1][c - 1] if c * B[l - 1] <= n_prompt else o

            below.extend(window(l, conditioners[u - 1], mid_input))
        conditioners = below
    dec = model.decoder(1)
    rows = []
    for p in range(T + 1):
        u, j = p // C[1], p % C[1]
        y = model.tok_emb_dec[torch.as_tensor(tokens[u * C[1]:u * C[1] + j], dtype=torch.long)]
        rows.append(dec(torch.cat([dec.prefix(conditioners[u]), y]))[-1] @ model.lm_head.T)
    return torch.stack(rows)


class TeacherForcing(unittest.TestCase):
    def check_against_per_position(self, config_json, seed, T):
        model = load(config_json, seed)
        tokens = random_tokens(T, seed)
        with torch.no_grad():
            batched = model(tokens)[0]
            self.assertEqual(batched.shape[0], T + 1)
            for p in range(T + 1):
                self.assertTrue(torch.allclose(batched[p], per_position_logits(model, tokens, p),
                                               atol=1e-10), f"position {p}")

    def test_l3_batched_pass_equals_per_position(self):
        self.check_against_per_position(L3, 7, 27)

    def test_l2_batched_pass_equals_per_position(self):
        self.check_against_per_position(L2, 8, 16)

    def test_block_transformer_batched_pass_equals_per_position(self):
        config = photon_config([L3["levels"][0]])
        config["levels"][0]["dim"] = 16
        self.check_against_per_position(config, 9, 11)

    def test_reconstructions_are_the_parent_window_outputs(self):
        model = load(L2, 6)  # C = (3, 2): a level-2 unit spans 6 tokens
        logits, X, Xhat = model(random_tokens(14, 6))
        self.assertIsNone(Xhat[0])
        self.assertEqual(Xhat[1].shape[0], 5)  # the level-1 units holding positions 0 .. 14
        # Level-2 unit 2 is conditioned on XL_1 and reads X(1)_3; it outputs Xhat(1)_3, Xhat(1)_4.
        dec = model.decoder(2)
        prefix = dec.converter(X[2][0]).reshape(dec.prefix_len, dec.width)
        out = dec(torch.cat([prefix, X[1][2:3]]))
        self.assertTrue(torch.allclose(Xhat[1][2], out[dec.prefix_len - 1], atol=1e-12))
        self.assertTrue(torch.allclose(Xhat[1][3], out[dec.prefix_len], atol=1e-12))

    def test_score_uses_the_previous_row_and_ignores_the_future(self):
        model = load(L3, 3)
        tokens = random_tokens(20, 3)
        full = score(model, tokens)
        self.assertIsNone(full[0])
        for n in (1, 2, 5, 12, 13):  # a prefix scores exactly as inside the longer sequence
            for a, b in zip(score(model, tokens[:n])[1:], full[1:n]):
                self.assertAlmostEqual(a, b, places=10)
        logits = model(tokens)[0]
        self.assertAlmostEqual(full[4], float(torch.log_softmax(logits[4], 0)[tokens[4]]),
                               places=12)

    def test_vanilla_rows_predict_the_next_token(self):
        config = {"arch": "vanilla", "vocab_size": 64, "dim": 12, "layers": 2, "heads": 4,
                  "kv_heads": 2, "head_dim": 4, "ffn_dim": 20, "max_seq_len": 64}
        model = load(config, 4)
        tokens = random_tokens(9, 4)
        with torch.no_grad():
            h = model.tok_emb[tokens]
            for layer in model.layers:
                h = layer(h)
            h = rms_norm(h, model.norm, 1e-5)
        expected = torch.log_softmax(h @ model.lm_head.T, dim=-1)
        got = score(model, tokens)
        for i in range(1, 9):
            self.assertAlmostEqual(got[i], float(expected[i - 1, tokens[i]]), places=10)


class Generation(unittest.TestCase):
    def test_hiergen_logprobs_equal_teacher_forced_scores(self):
        model = load(L2, 5)
        prompt = random_tokens(4, 5)
        out = generate_hiergen(model, prompt, 10)
        scored = score(model, prompt + out["tokens"])
        for i, lp in enumerate(out["logprobs"]):
            self.assertAlmostEqual(lp, scored[len(prompt) + i], places=10)

    def check_recgen(self, config_json, seed):
        model = load(config_json, seed)
        base = random_tokens(15, seed + 1)
        B = model.config.block_tokens(model.config.num_levels)
        differs = False
        for n in range(1, len(base) + 1):
            prompt = base[:n]
            rec = generate_recgen(model, prompt, 2 * B)
            hier = generate_hiergen(model, prompt, 1)
            # The first token only sees the prompt, where RecGen is teacher forcing.
            self.assertEqual(rec["tokens"][0], hier["tokens"][0])
            self.assertAlmostEqual(rec["logprobs"][0], hier["logprobs"][0], places=10)
            full = prompt + rec["tokens"]
            with torch.no_grad():
                logits = recgen_level_by_level(model, full, n)
                teacher = model(full)[0]
            for i, token in enumerate(rec["tokens"]):
                row = logits[n + i]
                self.assertEqual(token, int(torch.argmax(row)), f"prompt {n}, step {i}")
                self.assertAlmostEqual(rec["logprobs"][i],
                                       float(torch.log_softmax(row, 0)[token]), places=9)
                differs |= not torch.allclose(row, teacher[n + i], atol=1e-6)
        self.assertTrue(differs, "RecGen never departed from teacher forcing")

    def test_recgen_l2_matches_level_by_level_formulation(self):
        self.check_recgen(L2, 11)

    def test_recgen_l3_matches_level_by_level_formulation(self):
        self.check_recgen(L3, 12)

    def test_recgen_needs_two_levels(self):
        config = photon_config([L3["levels"][0]])
        config["levels"][0]["dim"] = 16
        with self.assertRaises(ValueError):
            generate_recgen(load(config, 1), [1, 5], 2)


class RecGenScoring(unittest.TestCase):
    def assert_logprobs_equal(self, got, expected, places=10, what=""):
        self.assertEqual(len(got), len(expected), what)
        self.assertIsNone(got[0], what)
        for i in range(1, len(got)):
            self.assertAlmostEqual(got[i], expected[i], places=places, msg=f"{what} position {i}")

    def check_against_level_by_level(self, config_json, seed, T):
        model = load(config_json, seed)
        tokens = random_tokens(T, seed + 100)  # not the model's own choices
        B = model.config.block_tokens(model.config.num_levels)
        for K in sorted({1, 2, 3, B - 1, B, B + 1, 2 * B, T - 1}):
            with torch.no_grad():
                logprobs = torch.log_softmax(recgen_level_by_level(model, tokens, K), dim=-1)
            expected = [None] + [float(logprobs[i, tokens[i]]) for i in range(1, T)]
            self.assert_logprobs_equal(score_recgen(model, tokens, K), expected, 9, f"K={K}")

    def test_l2_matches_level_by_level_formulation(self):
        self.check_against_level_by_level(L2, 21, 30)

    def test_l3_matches_level_by_level_formulation(self):
        self.check_against_level_by_level(L3, 22, 33)

    def check_greedy_continuation(self, config_json, seed):
        """Scoring what RecGen generated greedily gives the log-probabilities it reported."""
        model = load(config_json, seed)
        base = random_tokens(14, seed + 1)
        for K in (1, 5, 6, 13, 14):
            prompt = base[:K]
            out = generate_recgen(model, prompt, 25)
            scored = score_recgen(model, prompt + out["tokens"], K)
            for i, lp in enumerate(out["logprobs"]):
                self.assertAlmostEqual(scored[K + i], lp, places=10, msg=f"K={K} step {i}")

    def test_l2_scores_its_own_greedy_continuation(self):
        self.check_greedy_continuation(L2, 23)

    def test_l3_scores_its_own_greedy_continuation(self):
        self.check_greedy_continuation(L3, 24)

    def test_prompt_positions_are_teacher_forced(self):
        model = load(L3, 25)
        tokens = random_tokens(30, 25)
        teacher = score(model, tokens)
        for K in (1, 7, 12, 29):
            self.assert_logprobs_equal(score_recgen(model, tokens, K)[:K + 1], teacher[:K + 1],
                                       what=f"K={K}")
        for K in (30, 31, 100):  # the whole sequence is prompt: teacher forcing throughout
            self.assert_logprobs_equal(score_recgen(model, tokens, K), teacher, what=f"K={K}")
        # Past the prompt RecGen is not teacher forcing (else the checks above prove nothing).
        rec = score_recgen(model, tokens, 7)
        self.assertGreater(max(abs(a - b) for a, b in zip(rec[8:], teacher[8:])), 1e-3)

    def test_a_later_token_reaches_only_its_own_level1_window(self):
        model = load(L2, 26)  # C_1 = 3
        tokens = random_tokens(30, 26)
        K = 8
        before = score_recgen(model, tokens, K)
        for p in (8, 10, 16, 20):  # 0-based positions after the prompt
            changed = list(tokens)
            changed[p] = 3 + (tokens[p] - 2) % 61  # another id
            after = score_recgen(model, changed, K)
            unit_end = (p // 3 + 1) * 3  # positions p + 1 .. unit_end - 1 share p's window
            for i in range(1, 30):
                if i == p:
                    continue  # its own log-probability is of another token now
                if p < i < unit_end:
                    self.assertNotAlmostEqual(after[i], before[i], places=6, msg=f"p={p} i={i}")
                else:
                    self.assertAlmostEqual(after[i], before[i], places=12, msg=f"p={p} i={i}")

    def test_needs_a_prompt_and_two_levels(self):
        with self.assertRaises(ValueError):
            score_recgen(load(L2, 27), [1, 5, 9], 0)
        config = photon_config([L3["levels"][0]])
        config["levels"][0]["dim"] = 16
        with self.assertRaises(ValueError):
            score_recgen(load(config, 27), [1, 5, 9], 1)

    def test_command_line_gives_the_same_numbers(self):
        directory = tempfile.mkdtemp(prefix="photon_ref_test_")
        config_path, weights_path = write_random_model(directory, L2, 28)
        tokens = random_tokens(20, 28)
        out = subprocess.run(
            [sys.executable, "-m", "photon_ref", "score", "--config", config_path, "--weights",
             weights_path, "--tokens", ",".join(map(str, tokens)), "--mode", "recgen",
             "--prompt-tokens", "7"], capture_output=True, text=True, check=True,
            env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
        expected = score_recgen(load_model(config_path, weights_path), tokens, 7)
        self.assertEqual(json.loads(out.stdout)["logprobs"], expected)


if __name__ == "__main__":
    torch.set_num_threads(1)
    unittest.main()
