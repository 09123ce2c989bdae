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

    def unit_counts(self, P):
        """n[l]: the level-l units touched by positions 0 .. P-1 (n[0] = P)."""
        n = [P]
        for l in range(1, self.config.num_levels + 1):
            n.append(-(-n[l - 1] // self.config.level(l).chunk_len))
        return n

    def windows_batch(self, l, z, y, children):
        """The level-l windows of U units at once, teacher-forced: z [B, U, D_l] their conditioners,
        y [B, n, E_l] the inputs of the first n children. Returns the outputs of the first
        `children` children, [B, children, E_l]."""
        dec = self.decoder(l)
        batch, U, C = z.shape[0], z.shape[1], dec.chunk_len
        y = y[:, :U * C]
        # Missing inputs of a partial last unit are zero-filled; no kept output sees them.
        y = torch.cat([y, y.new_zeros(batch, U * C - y.shape[1], y.shape[2])], dim=1)
        y = y.reshape(batch, U, C, -1)[:, :, :C - 1]
        out = dec.window_outputs(dec.prefix(z), y)  # [B, U, C, E_l]
        return out.reshape(batch, U * C, -1)[:, :children]

    def top_conditioners(self, X, U):
        """z(L)_1 = start, z(L)_u = XL_{u-1}, for u = 1 .. U: [B, U, D_L]."""
        start = self.decoder(self.config.num_levels).start.expand(X[0].shape[0], 1, -1)
        return torch.cat([start, X[-1][:, :U - 1]], dim=1)

    def forward_batch(self, tokens, positions=None):
        """Teacher-forced pass over tokens [B, T] (photon_ref.Photon.forward, batched).

        Returns (logits, X, Xhat): logits [B, P, V] where row p is the distribution of the token at
        0-based position p given tokens[:, :p], for p = 0 .. P - 1 with P = `positions` (default T:
        every position that has a target; photon_ref uses T + 1, adding the next token's row).
        X and Xhat as in photon_ref, with a leading batch axis.
        """
        P = tokens.shape[1] if positions is None else positions
        z, X, Xhat = self.conditioners_batch(tokens, P)
        out = self.windows_batch(1, z, self.tok_emb_dec[tokens], P)
        return out @ self.lm_head.T, X, Xhat

    def conditioners_batch(self, tokens, P):
        """The teacher-forced pass above level 1: (z, X, Xhat), z [B, U, D_1] the conditioners of
        the U level-1 units that hold positions 0 .. P-1; X and Xhat as forward_batch's."""
        L = self.config.num_levels
        X = self.encode_batch(tokens)
        n_units = self.unit_counts(P)
        z = self.top_conditioners(X, n_units[L])
        Xhat = [None] * L
        for l in range(L, 1, -1):
            Xhat[l - 1] = z = self.windows_batch(l, z, X[l - 1], n_units[l - 1])
        return z, X, Xhat

    def recgen_windows(self, l, z, X_below, in_prompt):
        """The level-l windows (l >= 2) of U units under RecGen: z [B, U, D_l]; the input of child
        c is its encoder state X_below[:, c - 1] where in_prompt[:, c - 1] (the child lies entirely
        in the prompt), else the window's own output for c. Children run left to right, as each
        input may be the previous output. Returns the outputs of all U C children, [B, U C, E_l]."""
        dec = self.decoder(l)
        batch, U, C = z.shape[0], z.shape[1], dec.chunk_len
        prefix = dec.prefix(z)  # [B, U, R, E]
        # Encoder states of the U C children (zero where the child is not complete, so not in the
        # prompt either).
        known = X_below[:, :U * C]
        known = torch.cat([known, known.new_zeros(batch, U * C - known.shape[1],
                                                  known.shape[2])], dim=1).reshape(batch, U, C, -1)
        mask = in_prompt[:, :U * C].reshape(batch, U, C, 1)
        ys, outs = [], []
        for j in range(C):
            y = torch.stack(ys, dim=2) if ys else prefix.new_zeros(batch, U, 0, prefix.shape[-1])
            o = dec.window_outputs(prefix, y)[:, :, -1]  # output j + 1: sees y_1 .. y_j only
            outs.append(o)
            if j + 1 < C:
                ys.append(torch.where(mask[:, :, j], known[:, :, j], o))
        return torch.stack(outs, dim=2).reshape(batch, U * C, -1)

    def recgen_latents(self, tokens, prompt_tokens, positions=None, X=None):
        """The latents of RecGen (spec 5; photon_ref.RecGenPlan, batched): sequence b's prompt is
        tokens[b, :prompt_tokens[b]], every later token is consumed as RecGen consumes a generated
        one. Returns Xhat: Xhat[l] [B, n_l, D_l] the RecGen latents Xhat(l) of the level-l units
        touched by positions 0 .. P-1 (P as in forward_batch), l = 1 .. L-1; Xhat[1] are the
        level-1 windows' conditioners. They depend on the prompts alone. X: the encoder states of
        `tokens` (encode_batch) if the caller has them, else the prompts are encoded here."""
        cfg = self.config
        L = cfg.num_levels
        batch, T = tokens.shape
        P = T if positions is None else positions
        n_units = self.unit_counts(P)
        K = torch.as_tensor(prompt_tokens).reshape(-1, 1).expand(batch, 1)
        K_min = int(K.min())
        # Only the states of units entirely in a prompt are read; the others are zero-filled.
        X = self.encode_batch(tokens[:, :int(K.max())]) if X is None else X
        X = [x if x.shape[1] >= n else torch.cat([x, x.new_zeros(batch, n - x.shape[1],
                                                               x.shape[2])], dim=1)
             for x, n in zip(X, n_units)]

        def in_prompt(l, count):  # [B, count]: level-l unit c (1-based) has c B_l <= K_b
            c = torch.arange(1, count + 1)
            return (c * cfg.block_tokens(l))[None, :] <= K

        # Top units in every prompt are teacher-forced: their windows run at once, their encoder
        # states are X(L). The others run one at a time: unit u's window gives its children's
        # latents, whose chunker input steps the top encoder, whose state conditions unit u + 1.
        enc, C, below = self.encoder(L), cfg.level(L).chunk_len, X[L - 1]
        U = n_units[L]
        shared = min(K_min // cfg.block_tokens(L), U)
        z_shared = self.top_conditioners(X, shared + 1)
        outs = [self.windows_batch(L, z_shared[:, :shared], below, shared * C)] if shared else []
        a = enc.chunk(below[:, :shared * C].reshape(batch, shared, C * below.shape[2]))
        z = z_shared[:, shared]
        mask = in_prompt(L - 1, U * C)
        for u in range(shared, U):
            window_mask = mask[:, u * C:(u + 1) * C]
            o = self.recgen_windows(L, z[:, None], below[:, u * C:(u + 1) * C], window_mask)
            outs.append(o)
            if u + 1 < U:  # then unit u lies before position P - 1, so it is complete
                latents = torch.where(window_mask[:, :, None], below[:, u * C:(u + 1) * C], o)
                a = torch.cat([a, enc.chunk(latents.reshape(batch, 1, -1))], dim=1)
                z = enc(a)[:, -1]
        Xhat = [None] * L
        Xhat[L - 1] = z = torch.cat(outs, dim=1)[:, :n_units[L - 1]]
        for l in range(L - 1, 1, -1):
            out = self.recgen_windows(l, z, X[l - 1], in_prompt(l - 1, n_units[l] * cfg.level(
                l).chunk_len))
            Xhat[l - 1] = z = out[:, :n_units[l - 1]]
        return Xhat

    def recgen_batch(self, tokens, prompt_tokens, positions=None):
        """RecGen pass (photon_ref.recgen_logits, batched; prompts as in recgen_latents). Returns
        (logits, first, Xhat): logits [B, P - first, V], row i being the distribution of the token
        at position first + i, for positions up to P - 1; `first` is the first position of the
        first level-1 unit not in every prompt (earlier rows are teacher forcing's and are not
        computed); Xhat as recgen_latents returns it. Rows p <= prompt_tokens[b] equal teacher
        forcing."""
        P = tokens.shape[1] if positions is None else positions
        Xhat = self.recgen_latents(tokens, prompt_tokens, P)
        C1 = self.config.level(1).chunk_len
        first_unit = min(int(torch.as_tensor(prompt_tokens).min()) // C1, Xhat[1].shape[1] - 1)
        first = first_unit * C1
        out = self.windows_batch(1, Xhat[1][:, first_unit:], self.tok_emb_dec[tokens[:, first:]],
                                 P - first)
        return out @ self.lm_head.T, first, Xhat


@torch.no_grad()
def hiergen_greedy(model: TrainPhoton, prompts, n):
    """n greedy HierGen tokens (argmax, lowest id on ties) after each of prompts [B, K]: [B, n].
    HierGen is teacher forcing evaluated incrementally, and a level-1 unit's conditioner depends
    only on the tokens before the unit, so each unit needs one pass above level 1 and then its own
    window, one token at a time."""
    tokens = prompts
    C1, end = model.config.level(1).chunk_len, prompts.shape[1] + n
    dec = model.decoder(1)
    while tokens.shape[1] < end:
        u = tokens.shape[1] // C1  # the 0-based level-1 unit that holds the next position
        prefix = dec.prefix(model.conditioners_batch(tokens, tokens.shape[1] + 1)[0][:, u])
        while tokens.shape[1] < min((u + 1) * C1, end):
            o = dec.window_outputs(prefix, model.tok_emb_dec[tokens[:, u * C1:]])[:, -1]
            tokens = torch.cat([tokens, (o @ model.lm_head.T).argmax(dim=-1, keepdim=True)], 1)
    return tokens[:, prompts.shape[1]:]


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


def losses(model, tokens, alpha, detach_target=False, recgen=None):
    """(loss, token_loss, [recursive loss per level 2..L], recgen_loss) for tokens [B, T], each
    sequence starting with BOS: spec 3.4's loss, token_loss being the mean NLL of tokens 1 .. T-1
    (detach_target: see recursive_losses), plus, if recgen = (weight, prompt_tokens, horizon,
    units) is given, weight * recgen_loss, the RecGen NLL of recgen_token_loss (it reuses the
    teacher-forced pass's encoder states); recgen_loss is None otherwise."""
    recgen_loss = None
    if isinstance(model, Vanilla):
        logits = Vanilla.forward(model, tokens)[:, :-1]  # row i predicts tokens[i + 1]
        rec = []
    else:
        logits, X, Xhat = model.forward_batch(tokens)
        logits = logits[:, 1:]  # row p predicts tokens[p]; BOS's own row is not scored
        rec = recursive_losses(model, X, Xhat, detach_target)
        if recgen is not None:
            _, prompt_tokens, horizon, units = recgen
            recgen_loss = recgen_token_loss(model, tokens, prompt_tokens, horizon, units, X)
    token_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss = token_loss + alpha * sum(rec) if rec else token_loss
    if recgen_loss is not None:
        loss = loss + recgen[0] * recgen_loss
    return loss, token_loss, rec, recgen_loss


def recgen_token_loss(model: TrainPhoton, tokens, prompt_tokens, horizon=None, units=None,
                      X=None):
    """Mean NLL under RecGen (TrainPhoton.recgen_latents) of the tokens after each sequence's
    prompt: positions p with prompt_tokens[b] <= p < prompt_tokens[b] + horizon (default: to the
    end) of tokens [B, T]; the first of them only sees the prompt. `units` (0-based level-1 unit
    indices) restricts the level-1 windows run to those units: an unbiased estimate of the loss over
    all of them at a fraction of the cost (the latents above level 1 are computed up to the last).
    X: the encoder states of tokens, if a teacher-forced pass has them."""
    batch, T = tokens.shape
    K = torch.as_tensor(prompt_tokens).reshape(-1, 1).expand(batch, 1)
    end = T if horizon is None else min(T, int(K.max()) + horizon)  # positions scored: < end
    C1 = model.config.level(1).chunk_len
    if units is None:
        units = torch.arange(int(K.min()) // C1, -(-end // C1))
    positions = (units[:, None] * C1 + torch.arange(C1)[None, :]).reshape(-1)
    Xhat = model.recgen_latents(tokens, K, int(positions.max()) + 1, X)
    # A unit past the end reads stand-in tokens; only its positions >= T see them (masked below).
    targets = tokens[:, positions.clamp(max=T - 1)]
    out = model.windows_batch(1, Xhat[1][:, units], model.tok_emb_dec[targets], len(positions))
    nll = F.cross_entropy((out @ model.lm_head.T).transpose(1, 2), targets, reduction="none")
    p = positions[None, :]
    scored = (p >= K) & (p >= 1) & (p < end)
    if horizon is not None:
        scored &= p < K + horizon
    return (nll * scored).sum() / scored.sum()


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
