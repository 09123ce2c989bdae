"""Greedy generation (spec section 5), written for clarity rather than speed.

Greedy means temperature 0: the argmax, the lowest id on ties. Each generated token comes with its
log probability under the model's unmodified distribution, log_softmax(logits)[token].
"""

from functools import lru_cache

import torch

from .model import Photon


def greedy(logits):
    """(token, logprob, margin): the argmax (lowest id on ties), its log probability, and the gap
    between the best and second-best logit (how far float rounding is from flipping the choice)."""
    token = int(torch.nonzero(logits == logits.max())[0, 0])
    top2 = torch.topk(logits, 2).values
    logprob = float(torch.log_softmax(logits, dim=-1)[token])
    return token, logprob, float(top2[0] - top2[1])


def _generate(next_logits, prompt, n):
    """Appends n greedy tokens to prompt, asking next_logits(tokens) for each distribution."""
    tokens, out, logprobs, margins = list(prompt), [], [], []
    with torch.no_grad():
        for _ in range(n):
            token, logprob, margin = greedy(next_logits(tokens))
            tokens.append(token)
            out.append(token)
            logprobs.append(logprob)
            margins.append(margin)
    return {"tokens": out, "logprobs": logprobs, "margins": margins}


def generate_hiergen(model, prompt, n):
    """HierGen (and vanilla decoding): exactly teacher forcing evaluated incrementally, so each step
    re-runs the teacher-forced model on the whole sequence and takes its last distribution.
    Returns {"tokens", "logprobs", "margins"} for the n generated tokens."""
    return _generate(model.next_logits, prompt, n)


def generate_recgen(model, prompt, n):
    """RecGen (photon, L >= 2). Returns {"tokens", "logprobs", "margins"} as generate_hiergen."""
    if not isinstance(model, Photon) or model.config.num_levels < 2:
        raise ValueError("RecGen needs a photon model with at least 2 levels")
    n_prompt = len(prompt)
    with torch.no_grad():
        X = model.encode(prompt)  # the same at every step: computed once, for long prompts
    return _generate(lambda tokens: recgen_next_logits(model, tokens, n_prompt, X), prompt, n)


def recgen_next_logits(model: Photon, tokens, n_prompt, X=None):
    """p(next token | tokens) under RecGen, where tokens[:n_prompt] is the prompt and the rest was
    generated. Recomputed from scratch: every quantity below is defined as in spec section 5.
    X, if given, is model.encode(tokens[:n_prompt]).

    Units are 1-based as in the spec: level-l unit u has children (u-1) C_l + j, j = 1 .. C_l.
    """
    cfg = model.config
    L = cfg.num_levels
    C = [None] + [cfg.level(l).chunk_len for l in range(1, L + 1)]  # C[l] = C_l
    B = [cfg.block_tokens(l) for l in range(L + 1)]  # B[l] = tokens spanned by a level-l unit

    # Prefill: the encoders ran teacher-forced over the complete units of the prompt only;
    # encoders below L are never run again.
    if X is None:
        X = model.encode(tokens[:n_prompt])

    def in_prompt(l, c):
        """Whether level-l unit c lies entirely inside the prompt (so X(l)_c exists)."""
        return c * B[l] <= n_prompt

    def latent(l, c):
        """The latent of level-l unit c (1 <= l < L): its encoder state X(l)_c if it lies entirely
        in the prompt, else the reconstruction Xhat(l)_c."""
        return X[l][c - 1] if in_prompt(l, c) else reconstruction(l, c)

    def reconstruction(l, c):
        """Xhat(l)_c = output j of the level-(l+1) window of c's parent (c is its child j)."""
        parent, j = (c - 1) // C[l + 1] + 1, (c - 1) % C[l + 1] + 1
        return window(l + 1, parent)[j - 1]

    @lru_cache(maxsize=None)
    def top_states(M):
        """XL_1 .. XL_M. a_v = chunker_L(concat of v's children's latents); the level-L encoder runs
        over a_1 .. a_M, which equals stepping it once per completed unit (it is causal). For a top
        unit inside the prompt every child is in the prompt, so this is its normal encoding."""
        enc = model.encoder(L)
        a = [enc.chunk(torch.cat([latent(L - 1, (v - 1) * C[L] + j) for j in range(1, C[L] + 1)]))
             for v in range(1, M + 1)]
        return enc(torch.stack(a))

    def conditioner(l, u):
        """z(l)_u: the start vector or XL_{u-1} at the top, Xhat(l)_u below."""
        if l == L:
            return model.decoder(L).start if u == 1 else top_states(u - 1)[u - 2]
        return reconstruction(l, u)

    @lru_cache(maxsize=None)
    def window(l, u):
        """Outputs o_1 .. o_{C_l} of the level-l window of unit u, for l >= 2, left to right: the
        input y_j of child u_j is X(l-1)_{u_j} if the child lies entirely in the prompt, else the
        window's own output o_j = Xhat(l-1)_{u_j}."""
        dec = model.decoder(l)
        prefix = dec.prefix(conditioner(l, u))
        ys, outputs = [], []
        for j in range(1, C[l] + 1):
            y = torch.stack(ys) if ys else prefix.new_zeros(0, prefix.shape[1])
            o_j = dec.window_outputs(prefix, y)[-1]  # output at position R - 1 + (j - 1)
            outputs.append(o_j)
            child = (u - 1) * C[l] + j
            ys.append(X[l - 1][child - 1] if in_prompt(l - 1, child) else o_j)
        return outputs

    # The level-1 window of the unit holding the next position p (1-based) always reads the actual
    # tokens before p in that unit, prompt or generated.
    p = len(tokens) + 1
    u, j = (p - 1) // C[1] + 1, (p - 1) % C[1] + 1
    dec = model.decoder(1)
    first = (u - 1) * C[1]  # 0-based index of the unit's first token
    y = model.tok_emb_dec[torch.as_tensor(tokens[first:first + j - 1], dtype=torch.long)]
    o_j = dec.window_outputs(dec.prefix(conditioner(1, u)), y)[-1]
    return o_j @ model.lm_head.T
