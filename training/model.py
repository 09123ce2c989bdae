"""Training modules: photon_ref's spec modules, run on batches of equal-length sequences.

The trainer reuses photon_ref's Stack, encoder and decoder levels unchanged (their state_dict keys
are the tensor names of spec section 6, so export is a plain state_dict dump). Only the top-level
teacher-forced pass is rewritten here, for a batch axis: photon_ref.Photon.forward takes one
sequence.
training/test_model.py checks that this pass equals photon_ref's float64 forward.
"""

import math

import torch
from torch.nn import functional as F

from photon_ref.model import Config, Photon, Vanilla


class TrainPhoton(Photon):
    """photon_ref.Photon with a batched teacher-forced pass."""

    def encode_batch(self, tokens):
        """photon_ref.Photon.encode over tokens [B, T]: X[l] is [B, M_l, D_l] (X[0] embeddings)."""
        X = [self.tok_emb_enc[tokens]]
        for l in range(1, self.config.num_levels + 1):
            enc = self.encoder(l)
            below = X[l - 1]
            batch, n, width = below.shape
            M = n // enc.chunk_len  # complete level-l units
            a = enc.chunk(below[:, :M * enc.chunk_len].reshape(batch, M, enc.chunk_len * width))
            X.append(enc(a))
        return X

    def forward_batch(self, tokens, positions=None):
        """Teacher-forced pass over tokens [B, T] (photon_ref.Photon.forward, batched).

        Returns (logits, X, Xhat): logits [B, P, V] where row p is the distribution of the token at
        0-based position p given tokens[:, :p], for p = 0 .. P - 1 with P = `positions` (default T:
        every position that has a target; photon_ref uses T + 1, adding the next token's row).
        X and Xhat as in photon_ref, with a leading batch axis.
        """
        cfg = self.config
        L = cfg.num_levels
        batch, T = tokens.shape
        P = T if positions is None else positions
        X = self.encode_batch(tokens)
        n_units = [P]  # level-l units touched by positions 0 .. P-1
        for l in range(1, L + 1):
            n_units.append(-(-n_units[l - 1] // cfg.level(l).chunk_len))
        dec_top = self.decoder(L)
        start = dec_top.start.expand(batch, 1, -1)
        z = torch.cat([start, X[L][:, :n_units[L] - 1]], dim=1)  # z(L)_1 = start, z(L)_u = XL_{u-1}
        Xhat = [None] * L
        for l in range(L, 0, -1):
            dec = self.decoder(l)
            C, U = dec.chunk_len, n_units[l]
            y = self.tok_emb_dec[tokens] if l == 1 else X[l - 1]
            y = y[:, :U * C]
            # Missing inputs of a partial last unit are zero-filled; no kept output sees them.
            y = torch.cat([y, y.new_zeros(batch, U * C - y.shape[1], y.shape[2])], dim=1)
            y = y.reshape(batch, U, C, -1)[:, :, :C - 1]
            out = dec.window_outputs(dec.prefix(z), y)  # [B, U, C, E_l]
            out = out.reshape(batch, U * C, -1)[:, :n_units[l - 1]]
            if l >= 2:
                Xhat[l - 1] = out
                z = out
            else:
                logits = out @ self.lm_head.T
        return logits, X, Xhat


def recursive_losses(model: TrainPhoton, X, Xhat, detach_target=False):
    """[mean_c (1 - cos(Xhat(l-1)_c, X(l-1)_c)) for l = 2 .. L], over the children c of the complete
    level-l units (spec 3.4); empty for L = 1.

    detach_target stops the gradient into the encoder states X: the value is the same, but only the
    top-down pathway learns to reconstruct. With the gradient into X (the default, the loss as
    written), the encoder can also satisfy the loss by collapsing X(l-1) onto one direction, which
    is what alpha = 0.3 does at this project's scale (docs/quality.md)."""
    losses = []
    for l in range(2, model.config.num_levels + 1):
        n = X[l].shape[1] * model.config.level(l).chunk_len
        if n == 0:  # no complete level-l unit yet: nothing to reconstruct
            losses.append(X[l - 1].new_zeros(()))
            continue
        target = X[l - 1][:, :n].detach() if detach_target else X[l - 1][:, :n]
        cos = F.cosine_similarity(Xhat[l - 1][:, :n], target, dim=-1)
        losses.append((1.0 - cos).mean())
    return losses


def losses(model, tokens, alpha, detach_target=False):
    """(loss, token_loss, [recursive loss per level 2..L]) of spec 3.4 for tokens [B, T], each
    sequence starting with BOS. token_loss is the mean NLL of tokens 1 .. T-1. detach_target: see
    recursive_losses."""
    if isinstance(model, Vanilla):
        logits = Vanilla.forward(model, tokens)[:, :-1]  # row i predicts tokens[i + 1]
        rec = []
    else:
        logits, X, Xhat = model.forward_batch(tokens)
        logits = logits[:, 1:]  # row p predicts tokens[p]; BOS's own row is not scored
        rec = recursive_losses(model, X, Xhat, detach_target)
    token_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss = token_loss + alpha * sum(rec) if rec else token_loss
    return loss, token_loss, rec


def build_train_model(config: Config):
    return TrainPhoton(config) if config.arch == "photon" else Vanilla(config)


def count_layers(config: Config):
    if config.arch == "vanilla":
        return config.stack.layers
    return sum(lv.encoder.layers + lv.decoder.layers for lv in config.levels)


@torch.no_grad()
def init_weights(model, seed, std=0.02):
    """LLaMA-style init: matrices and embeddings N(0, std), output projections (attn.wo,
    ffn.w_down) scaled by 1/sqrt(2 * layers) so the residual stream does not grow with depth, norm
    weights 1, biases 0, the start vector N(0, 1) (it stands in for an RMS-normalised encoder
    state)."""
    generator = torch.Generator().manual_seed(seed)
    out_std = std / math.sqrt(2 * count_layers(model.config))
    for name, p in sorted(model.named_parameters()):
        last = name.rsplit(".", 1)[-1]
        if last == "start":
            p.copy_(torch.randn(p.shape, generator=generator))
        elif last == "bias":
            p.zero_()
        elif p.dim() == 1:
            p.fill_(1.0)
        else:
            scale = out_std if last in ("wo", "w_down") else std
            p.copy_(torch.randn(p.shape, generator=generator) * scale)
