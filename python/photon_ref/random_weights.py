"""Seeded random weights for test models, drawn so that greedy decoding is stable under rounding.

photon_model_init_random's std-0.02 init gives near-uniform logits, where float rounding can flip a
greedy argmax between implementations; these weights give peaked logits instead.
"""

import json
import math
import os

import numpy as np

from .model import Config, build_model


def random_weights(config_json, seed, logit_scale=6.0):
    """Every tensor of spec section 6 as float32 arrays: embeddings and the start vector N(0, 1);
    matrices N(0, 1/fan_in), lm_head times logit_scale (so logits have std ~logit_scale); norm
    weights 1 + 0.1 N; biases 0.1 N. Deterministic in (config, seed)."""
    rng = np.random.default_rng(seed)
    model = build_model(Config.from_json(config_json))
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    weights = {}
    for name in sorted(shapes):
        shape = shapes[name]
        last = name.rsplit(".", 1)[-1]
        if name in ("tok_emb", "tok_emb_enc", "tok_emb_dec") or last == "start":
            w = rng.standard_normal(shape)
        elif last == "bias":
            w = 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:  # attn_norm, ffn_norm, a stack's norm, a chunker's norm
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            scale = logit_scale if name == "lm_head" else 1.0
            w = scale * rng.standard_normal(shape) / math.sqrt(shape[1])
        weights[name] = w.astype(np.float32)
    return weights


def write_random_model(directory, config_json, seed, logit_scale=6.0, dtype=np.float32):
    """Writes directory/config.json and directory/weights.npz (arrays of `dtype`: float32, or
    float16 for small committed files); returns their paths."""
    os.makedirs(directory, exist_ok=True)
    config_path = os.path.join(directory, "config.json")
    weights_path = os.path.join(directory, "weights.npz")
    with open(config_path, "w") as f:
        json.dump(config_json, f, indent=1)
        f.write("\n")
    weights = random_weights(config_json, seed, logit_scale)
    np.savez(weights_path, **{name: w.astype(dtype) for name, w in weights.items()})
    return config_path, weights_path
