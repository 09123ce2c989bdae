"""The trainer's batched pass and loss against photon_ref's float64 forward (the spec).

    PYTHONPATH=python:. /usr/bin/python3 -m unittest training.test_model
"""

import unittest

import torch
from torch.nn import functional as F

from photon_ref.model import Config, build_model
from photon_ref.random_weights import random_weights
from photon_ref.recgen import RecGenPlan, recgen_logits
from photon_ref.generate import generate_hiergen
from training.model import (build_train_model, hiergen_greedy, init_weights, losses,
                            recgen_token_loss)

STACK = {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 6, "ffn_dim": 20}
PHOTON_L3 = {"arch": "photon", "vocab_size": 50, "embed_dim": 4, "token_dim": 12, "norm_eps": 1e-5,
             "rope_theta": 10000.0, "max_seq_len": 64,
             "levels": [{"chunk_len": 2, "chunker": "concat", "dim": 8, "prefix_len": 1,
                         "encoder": STACK, "decoder": STACK},
                        {"chunk_len": 3, "chunker": "linear", "dim": 10, "prefix_len": 2,
                         "encoder": STACK, "decoder": STACK},
                        {"chunk_len": 2, "chunker": "linear", "dim": 14, "prefix_len": 2,
                         "encoder": STACK, "decoder": STACK}]}
PHOTON_L2 = {"arch": "photon", "vocab_size": 50, "embed_dim": 4, "token_dim": 12, "norm_eps": 1e-5,
             "rope_theta": 10000.0, "max_seq_len": 64,
             "levels": [{"chunk_len": 4, "chunker": "concat", "dim": 16, "prefix_len": 2,
                         "encoder": STACK, "decoder": STACK},
                        {"chunk_len": 3, "chunker": "linear", "dim": 10, "prefix_len": 3,
                         "encoder": STACK, "decoder": STACK}]}
BLOCK = {**PHOTON_L2, "levels": PHOTON_L2["levels"][:1]}
VANILLA = {"arch": "vanilla", "vocab_size": 50, "dim": 16, "norm_eps": 1e-5, "rope_theta": 10000.0,
           "max_seq_len": 64, **STACK}
ALPHA = 0.3


def models(config_json, dtype):
    """(photon_ref float64 model, trainer model in dtype), both holding the same random weights."""
    config = Config.from_json(config_json)
    state = {k: torch.from_numpy(v) for k, v in random_weights(config_json, seed=7).items()}
    reference = build_model(config).to(torch.float64)
    reference.load_state_dict({k: v.double() for k, v in state.items()}, strict=True)
    trainer = build_train_model(config).to(dtype)
    trainer.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
    return reference, trainer


def token_batch(batch, length, vocab, seed=3):
    tokens = torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))
    tokens[:, 0] = 1  # BOS
    return tokens


def reference_loss(reference, tokens, alpha):
    """Spec 3.4 from photon_ref's single-sequence forward, averaged over the batch (every sequence
    has the same length, so the batch means equal the means of the per-sequence means)."""
    token_losses, rec_losses = [], []
    for sequence in tokens:
        if reference.config.arch == "vanilla":
            logits = reference(sequence)[:-1]
            rec = []
        else:
            logits, X, Xhat = reference(sequence)
            logits = logits[1:len(sequence)]
            rec = []
            for l in range(2, reference.config.num_levels + 1):
                n = X[l].shape[0] * reference.config.level(l).chunk_len
                if n == 0:
                    continue
                rec.append((1 - F.cosine_similarity(Xhat[l - 1][:n], X[l - 1][:n], dim=-1)).mean())
        token_losses.append(F.cross_entropy(logits, sequence[1:]))
        rec_losses.append(sum(rec) if rec else torch.zeros((), dtype=torch.float64))
    token_loss = torch.stack(token_losses).mean()
    return token_loss + alpha * torch.stack(rec_losses).mean(), token_loss


class TrainerMatchesReference(unittest.TestCase):
    def check_photon(self, config_json, length, dtype, tolerance):
        reference, trainer = models(config_json, dtype)
        tokens = token_batch(3, length, config_json["vocab_size"])
        with torch.no_grad():
            logits, X, Xhat = trainer.forward_batch(tokens, positions=length + 1)
            for b, sequence in enumerate(tokens):
                ref_logits, ref_X, ref_Xhat = reference(sequence)
                self.assertEqual(logits[b].shape, ref_logits.shape)
                torch.testing.assert_close(logits[b].double(), ref_logits, rtol=0, atol=tolerance)
                for l in range(len(ref_X)):
                    torch.testing.assert_close(X[l][b].double(), ref_X[l], rtol=0, atol=tolerance)
                for l in range(1, len(ref_Xhat)):
                    torch.testing.assert_close(Xhat[l][b].double(), ref_Xhat[l], rtol=0,
                                               atol=tolerance)
            loss, token_loss, _, _ = losses(trainer, tokens, ALPHA)
            ref_loss, ref_token_loss = reference_loss(reference, tokens, ALPHA)
        self.assertAlmostEqual(float(token_loss), float(ref_token_loss), delta=tolerance)
        self.assertAlmostEqual(float(loss), float(ref_loss), delta=tolerance)
        if length >= 12:  # a complete top unit: the recursive loss is live
            self.assertNotAlmostEqual(float(loss), float(token_loss), delta=1e-3)

    def test_photon_two_levels_float32(self):
        # 23 tokens: partial units at both levels; 24: complete top units (C_1 C_2 = 12).
        for length in (23, 24, 5):
            self.check_photon(PHOTON_L2, length, torch.float32, 1e-4)

    def test_photon_two_levels_float64_is_exact(self):
        self.check_photon(PHOTON_L2, 23, torch.float64, 1e-10)

    def check_recgen(self, config_json, length, prompts, dtype, tolerance):
        reference, trainer = models(config_json, dtype)
        tokens = token_batch(len(prompts), length, config_json["vocab_size"])
        with torch.no_grad():
            logits, first, Xhat = trainer.recgen_batch(tokens, torch.tensor(prompts),
                                                       positions=length + 1)
            self.assertEqual(first, min(prompts) // config_json["levels"][0]["chunk_len"]
                             * config_json["levels"][0]["chunk_len"])
            for b, sequence in enumerate(tokens):
                K = prompts[b]
                expected = recgen_logits(reference, sequence.tolist(), K)[first:]
                torch.testing.assert_close(logits[b].double(), expected, rtol=0, atol=tolerance)
                plan = RecGenPlan(reference, sequence.tolist()[:K])
                for l in range(1, len(Xhat)):
                    for c in range(1, Xhat[l].shape[1] + 1):
                        torch.testing.assert_close(Xhat[l][b, c - 1].double(),
                                                   plan.reconstruction(l, c), rtol=0,
                                                   atol=tolerance)

    def test_recgen_two_levels_float64_is_exact(self):
        # B_2 = 12: prompts inside the first top unit, at its end, across and past the second.
        self.check_recgen(PHOTON_L2, 29, [1, 4, 5, 12, 13, 23, 29, 40], torch.float64, 1e-10)

    def test_recgen_three_levels_float64_is_exact(self):
        self.check_recgen(PHOTON_L3, 27, [1, 2, 6, 7, 12, 13, 20], torch.float64, 1e-10)

    def test_recgen_prompts_sharing_top_units(self):
        # Top units inside every prompt take the teacher-forced path; later ones the recursion.
        self.check_recgen(PHOTON_L2, 40, [12, 13, 24, 29, 40], torch.float64, 1e-10)
        self.check_recgen(PHOTON_L3, 31, [25, 24, 30], torch.float64, 1e-10)

    def test_recgen_loss_scores_the_tokens_after_each_prompt(self):
        reference, trainer = models(PHOTON_L2, torch.float64)
        tokens = token_batch(3, 30, PHOTON_L2["vocab_size"])
        prompts = [5, 13, 27]
        logprobs = [torch.log_softmax(recgen_logits(reference, sequence.tolist(), prompts[b]),
                                      dim=-1) for b, sequence in enumerate(tokens)]
        # C_1 = 4: units [1, 4, 7] hold positions 4-7, 16-19 and 28-29 (the sequence ends).
        for horizon, units in ((None, None), (7, None), (None, [1, 4, 7]), (10, [4, 7])):
            nll = []
            for b, sequence in enumerate(tokens):
                end = 30 if horizon is None else min(30, prompts[b] + horizon)
                nll += [-float(logprobs[b][p, sequence[p]]) for p in range(prompts[b], end)
                        if units is None or p // 4 in units]
            units = None if units is None else torch.tensor(units)
            with torch.no_grad():
                loss = recgen_token_loss(trainer, tokens, torch.tensor(prompts), horizon, units)
                total, token_loss, _, shared = losses(trainer, tokens, 0.0, recgen=(
                    0.5, torch.tensor(prompts), horizon, units))
            self.assertAlmostEqual(float(loss), sum(nll) / len(nll), places=10,
                                   msg=f"horizon {horizon} units {units}")
            # With the teacher-forced pass's encoder states (of the whole sequence): the same.
            self.assertAlmostEqual(float(shared), float(loss), places=10)
            self.assertAlmostEqual(float(total), float(token_loss) + 0.5 * float(loss), places=10)

    def test_recgen_two_levels_float32(self):
        self.check_recgen(PHOTON_L2, 24, [1, 7, 12, 24], torch.float32, 1e-4)

    def test_hiergen_greedy_is_the_teacher_forced_argmax(self):
        reference, trainer = models(PHOTON_L2, torch.float64)
        prompts = token_batch(3, 6, PHOTON_L2["vocab_size"])
        with torch.no_grad():
            out = hiergen_greedy(trainer, prompts, 15)
            for b in range(3):
                expected = generate_hiergen(reference, prompts[b].tolist(), 15)["tokens"]
                self.assertEqual(out[b].tolist(), expected)

    def test_block_float32(self):
        reference, trainer = models(BLOCK, torch.float32)
        tokens = token_batch(2, 19, BLOCK["vocab_size"])
        with torch.no_grad():
            logits = trainer.forward_batch(tokens, positions=20)[0]
            for b, sequence in enumerate(tokens):
                torch.testing.assert_close(logits[b].double(), reference(sequence)[0], rtol=0,
                                           atol=1e-4)
            loss, token_loss, rec, _ = losses(trainer, tokens, ALPHA)
            ref_loss, _ = reference_loss(reference, tokens, ALPHA)
        self.assertEqual(rec, [])  # L = 1: no recursive term
        self.assertAlmostEqual(float(loss), float(ref_loss), delta=1e-4)

    def test_vanilla_float32(self):
        reference, trainer = models(VANILLA, torch.float32)
        tokens = token_batch(2, 17, VANILLA["vocab_size"])
        with torch.no_grad():
            loss, token_loss, rec, _ = losses(trainer, tokens, ALPHA)
            ref_loss, _ = reference_loss(reference, tokens, ALPHA)
        self.assertEqual(rec, [])
        self.assertAlmostEqual(float(loss), float(ref_loss), delta=1e-4)

    def test_gradients_reach_every_tensor(self):
        _, trainer = models(PHOTON_L2, torch.float32)
        init_weights(trainer, seed=0)
        # 48 tokens: the top encoder sees several units, so its queries and keys matter.
        loss, _, _, _ = losses(trainer, token_batch(2, 48, PHOTON_L2["vocab_size"]), ALPHA)
        loss.backward()
        for name, p in trainer.named_parameters():
            self.assertIsNotNone(p.grad, name)
            self.assertGreater(float(p.grad.abs().sum()), 0.0, name)

    def test_detached_target_keeps_the_value_and_changes_the_gradient(self):
        _, trainer = models(PHOTON_L2, torch.float32)
        tokens = token_batch(2, 48, PHOTON_L2["vocab_size"])
        grads, values = [], []
        for detach in (False, True):
            trainer.zero_grad()
            rec = sum(losses(trainer, tokens, ALPHA, detach_target=detach)[2])
            rec.backward()
            values.append(float(rec))
            grads.append(trainer.tok_emb_enc.grad.clone())
        self.assertEqual(values[0], values[1])
        self.assertGreater(float((grads[0] - grads[1]).abs().max()), 1e-6)


if __name__ == "__main__":
    unittest.main()
