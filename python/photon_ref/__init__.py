"""photon_ref: the float64 PyTorch reference of the PHOTON model spec (docs/spec.md).

    from photon_ref import load_model, score, score_recgen, generate_hiergen, generate_recgen
    model = load_model("config.json", "weights.npz")
    score(model, [1, 5, 9])                # [None, log p(5 | 1), log p(9 | 1 5)]
    score_recgen(model, [1, 5, 9, 4], 2)   # the same under RecGen with [1, 5] as the prompt
    generate_recgen(model, [1, 5, 9], 8)   # {"tokens": [...], "logprobs": [...], "margins": [...]}
"""

from .generate import generate_hiergen, generate_recgen, greedy
from .model import (Config, Photon, Vanilla, bf16_products, build_model, int8_products,
                    load_model, score, teacher_forced_logits)
from .recgen import RecGenPlan, recgen_logits, recgen_next_logits, score_recgen

__all__ = ["Config", "Photon", "Vanilla", "build_model", "load_model", "score",
           "teacher_forced_logits", "generate_hiergen", "generate_recgen", "greedy",
           "RecGenPlan", "recgen_logits", "recgen_next_logits", "score_recgen"]
