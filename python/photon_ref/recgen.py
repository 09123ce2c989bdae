"""RecGen (spec section 5): the latents a prompt sets up, and the token distributions they give.

Everything RecGen computes above level 1 is a function of the prompt alone. Below the top level the
encoders only ever see the prompt; a level-l unit (l >= 1) that is not entirely in the prompt enters
its parent's window, and the top chunker, as its reconstruction Xhat(l), the parent window's own
output. A token after the prompt therefore enters one place only: the input y of its own level-1
window. `RecGenPlan` holds these prompt-determined latents; `recgen_logits` evaluates every
level-1 window over the actual tokens, which is how a RecGen session scores a known continuation
(`score_recgen`) and, one token at a time, how it generates (photon_ref.generate).

Units are 1-based as in the spec: level-l unit u has the children (u-1) C_l + j, j = 1 .. C_l.
"""

import torch

from .model import Photon, linear


class RecGenPlan:
    """The RecGen latents of every unit at every level, for one prompt (computed on demand)."""

    def __init__(self, model, prompt):
        if not isinstance(model, Photon) or model.config.num_levels < 2:
            raise ValueError("RecGen needs a photon model with at least 2 levels")
        if len(prompt) < 1:
            raise ValueError("RecGen needs a prompt of at least one token (BOS)")
        cfg = model.config
        self.model, self.n_prompt, self.L = model, len(prompt), cfg.num_levels
        self.C = [None] + [cfg.level(l).chunk_len for l in range(1, self.L + 1)]  # C[l] = C_l
        self.B = [cfg.block_tokens(l) for l in range(self.L + 1)]  # B[l] = tokens of a level-l unit
        # Prefill: the encoders run teacher-forced over the complete units of the prompt only;
        # the encoders below L never run again.
        self.X = model.encode(prompt)
        self.windows = {}  # (l, u) -> outputs o_1 .. o_{C_l} of the level-l window of unit u
        self.top_inputs, self.top_states = [], []  # a_v and XL_v of the top units so far

    def in_prompt(self, l, c):
        """Whether level-l unit c lies entirely in the prompt (then its encoder state exists)."""
        return c * self.B[l] <= self.n_prompt

    def latent(self, l, c):
        """The latent of level-l unit c (1 <= l < L): X(l)_c if c lies entirely in the prompt, else
        the reconstruction Xhat(l)_c. It is the input y of c in its parent's window, and the top
        chunker's input for l = L - 1."""
        return self.X[l][c - 1] if self.in_prompt(l, c) else self.reconstruction(l, c)

    def reconstruction(self, l, c):
        """Xhat(l)_c = output j of the level-(l+1) window of c's parent (c being its child j)."""
        parent, j = (c - 1) // self.C[l + 1] + 1, (c - 1) % self.C[l + 1] + 1
        return self.window(l + 1, parent)[j - 1]

    def top_state(self, v):
        """XL_v. Top units are completed in order: a_v = chunker_L(concat of v's children's
        latents), and the level-L encoder steps once (a causal stack over a_1 .. a_v). For a top
        unit inside the prompt every child is in the prompt, so this is its normal encoding."""
        model, L = self.model, self.L
        enc = model.encoder(L)
        while len(self.top_states) < v:
            u = len(self.top_states) + 1
            children = [self.latent(L - 1, (u - 1) * self.C[L] + j)
                        for j in range(1, self.C[L] + 1)]
            self.top_inputs.append(enc.chunk(torch.cat(children)))
            self.top_states.append(enc(torch.stack(self.top_inputs))[-1])
        return self.top_states[v - 1]

    def conditioner(self, l, u):
        """z(l)_u: the start vector or XL_{u-1} at the top, Xhat(l)_u below."""
        if l == self.L:
            return self.model.decoder(self.L).start if u == 1 else self.top_state(u - 1)
        return self.reconstruction(l, u)

    def window(self, l, u):
        """Outputs o_1 .. o_{C_l} of the level-l window of unit u (l >= 2), left to right: the input
        y_j of child u_j is X(l-1)_{u_j} if the child lies entirely in the prompt, else the window's
        own output o_j = Xhat(l-1)_{u_j}."""
        if (l, u) not in self.windows:
            dec = self.model.decoder(l)
            prefix = dec.prefix(self.conditioner(l, u))
            ys, outputs = [], []
            for j in range(1, self.C[l] + 1):
                y = torch.stack(ys) if ys else prefix.new_zeros(0, prefix.shape[1])
                o_j = dec.window_outputs(prefix, y)[-1]  # output at position R - 1 + (j - 1)
                outputs.append(o_j)
                child = (u - 1) * self.C[l] + j
                ys.append(self.X[l - 1][child - 1] if self.in_prompt(l - 1, child) else o_j)
            self.windows[(l, u)] = outputs
        return self.windows[(l, u)]

    def unit_logits(self, u, unit_tokens):
        """The level-1 window of unit u over its known tokens (at most C_1 - 1 are read): logits
        [k + 1, V], row j being the distribution of the unit's token j + 1 (0-based j)."""
        model = self.model
        dec = model.decoder(1)
        y = model.tok_emb_dec[torch.as_tensor(unit_tokens[:self.C[1] - 1], dtype=torch.long)]
        return linear(dec.window_outputs(dec.prefix(self.conditioner(1, u)), y), model.lm_head)

    def next_logits(self, tokens):
        """p(next token | tokens) when tokens[:n_prompt] is this plan's prompt and every later
        token was generated (or consumed as a generated one)."""
        C1 = self.C[1]
        u, j = len(tokens) // C1 + 1, len(tokens) % C1  # the unit holding the next position
        return self.unit_logits(u, tokens[(u - 1) * C1:(u - 1) * C1 + j])[j]


def recgen_logits(model, tokens, prompt_tokens):
    """[T + 1, V] under RecGen with tokens[:prompt_tokens] as the prompt: row p is the distribution
    of the token at 0-based position p given tokens[:p] (row 0, BOS's own, is never scored; row T is
    the next token's). Rows p <= prompt_tokens only see the prompt and equal teacher forcing."""
    plan = RecGenPlan(model, tokens[:prompt_tokens])
    C1, T = plan.C[1], len(tokens)
    with torch.no_grad():
        rows = [plan.unit_logits(u, tokens[(u - 1) * C1:u * C1])
                for u in range(1, T // C1 + 2)]  # the units holding positions 0 .. T
        return torch.cat(rows)[:T + 1]


def recgen_next_logits(model, tokens, n_prompt):
    """p(next token | tokens) under RecGen, where tokens[:n_prompt] is the prompt and the rest was
    generated."""
    with torch.no_grad():
        return RecGenPlan(model, tokens[:n_prompt]).next_logits(tokens)


def score_recgen(model, tokens, prompt_tokens=1):
    """Log-probabilities a RecGen session assigns to tokens, as `score` returns them: [None,
    log p(t_1 | t_0), ..., log p(t_{T-1} | t_<T-1)] (0-based). tokens[:prompt_tokens] is the prompt
    (teacher-forced: the values for positions 1 .. prompt_tokens - 1 are teacher forcing's); every
    later token is consumed as RecGen consumes a token it sampled. prompt_tokens >= len(tokens)
    gives teacher forcing throughout."""
    if prompt_tokens < 1:
        raise ValueError(f"prompt_tokens must be at least 1, got {prompt_tokens}")
    logprobs = torch.log_softmax(recgen_logits(model, tokens, prompt_tokens), dim=-1)
    return [None] + [float(logprobs[i, tokens[i]]) for i in range(1, len(tokens))]

