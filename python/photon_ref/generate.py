"""Greedy generation (spec section 5), written for clarity rather than speed.

Greedy means temperature 0: the argmax, the lowest id on ties. Each generated token comes with its
log probability under the model's unmodified distribution, log_softmax(logits)[token].
"""

import torch

from .recgen import RecGenPlan


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
    """RecGen (photon, L >= 2). Returns {"tokens", "logprobs", "margins"} as generate_hiergen.
    The latents above level 1 depend on the prompt alone, so one RecGenPlan serves every step."""
    plan = RecGenPlan(model, prompt)
    return _generate(plan.next_logits, prompt, n)
