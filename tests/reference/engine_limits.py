"""The engine's batching limits, which the long reference comparisons (scripts/make-golden's long
cases, compare_engine.py's long models) cross with margin, so that work split across passes,
slices or blocks is checked beyond the first one.

Scoring runs a level's windows in passes of WINDOWS_PER_PASS (src/engine/photon_ops.cpp,
score_photon); a prefill consumes PREFILL_SLICE tokens at a time (Session::kPrefillSlice); the LM
head of scoring takes LOGIT_BLOCK rows at a time (token_logprobs). The engine is being redesigned:
when a limit moves or a new one appears, change it here and regenerate the golden vectors.
"""

import math

ENGINE_LIMITS = {"WINDOWS_PER_PASS": 256, "PREFILL_SLICE": 512, "LOGIT_BLOCK": 64}
LONG_MARGIN = 2.5  # each limit is crossed at least this many times over


def meta_tokens(config_json):
    """B_L, the tokens of one top-level unit (4 stands in for vanilla, which has none)."""
    if config_json["arch"] == "vanilla":
        return 4
    return math.prod(lv["chunk_len"] for lv in config_json["levels"])


def long_lengths(config_json):
    """(score length, base prompt length) for a model. The score crosses LONG_MARGIN times the
    largest limit: a pass of top-level windows spans WINDOWS_PER_PASS B_L tokens (the passes of
    lower levels are shorter), a prefill slice PREFILL_SLICE tokens; it ends one token past a
    top-level boundary, so the last unit of every level is partial. Prompts of base + k tokens
    (1 <= k <= B_L) cross LONG_MARGIN prefill slices; they stay shorter than the score because the
    reference re-runs the whole model for every generated token, which is quadratic in length."""
    B = meta_tokens(config_json)
    passes = ENGINE_LIMITS["WINDOWS_PER_PASS"] * B if config_json["arch"] == "photon" else 0
    span = max(ENGINE_LIMITS["PREFILL_SLICE"], passes, ENGINE_LIMITS["LOGIT_BLOCK"])
    base = math.ceil(LONG_MARGIN * ENGINE_LIMITS["PREFILL_SLICE"] / B) * B
    return math.ceil(LONG_MARGIN * span / B) * B + B + 1, base
