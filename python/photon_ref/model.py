"""The PHOTON model specification, version 1 ("the spec"), written to be read against it.

Modules are plain torch.nn.Modules whose state_dict keys are exactly the tensor names of spec
section 6, so `weights.npz` loads with `load_state_dict(strict=True)` and a trained model saves back
to the interchange format unchanged. The reference runs in float64 (`load_model` default); the
computation itself is dtype-agnostic so a trainer can run the same code in float32.

Sequences are 0-based here. The spec numbers tokens t_1 .. t_T; `tokens[i]` is t_{i+1}.

Logits convention (both architectures): `teacher_forced_logits(tokens)` has one row per token and
row i is the distribution of the token that FOLLOWS tokens[0..i]: p(tokens[i+1] | tokens[:i+1]).
The last row is therefore the next-token distribution used by generation.
"""

import contextlib
import json
import math
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# --------------------------------------------------------------------------------------------------
# Products of activations and weights
# --------------------------------------------------------------------------------------------------

_product_input = None  # what a product does to its input first (None: nothing)


@contextlib.contextmanager
def _products_taking(transform):
    global _product_input
    before, _product_input = _product_input, transform
    try:
        yield
    finally:
        _product_input = before


def _to_bf16(x):
    return x.to(torch.bfloat16).to(x.dtype)


def _to_int8_blocks(x):
    in_features = x.shape[-1]
    if in_features % 32 != 0:
        return x
    blocks = x.reshape(*x.shape[:-1], in_features // 32, 32)
    d = blocks.abs().amax(dim=-1, keepdim=True) / 127
    q = torch.clamp(torch.round(blocks / torch.where(d == 0, 1, d)), -127, 127)  # ties to even
    return (q * d).reshape(x.shape)


def bf16_products():
    """Within it, every product of activations and weights (linear) first rounds its input to
    bfloat16 (nearest even): the SDK's bf16 precision (photon_load_options_set_precision). The
    model's other arithmetic (attention's scores and weighted sums included) is unchanged."""
    return _products_taking(_to_bf16)


def int8_products():
    """Within it, every product with a weight of whole blocks of 32 columns (the matrices a q8
    file stores in q8) first quantizes its input per block of 32 values: d = max |x| / 127, q =
    x / d rounded to nearest even within [-127, 127] (0 where d is 0), and takes d q: the SDK's
    int8 precision on a q8 model. Every other product, and the model's other arithmetic, is
    unchanged."""
    return _products_taking(_to_int8_blocks)


def linear(x, w, bias=None):
    """x W^T (+ bias): every product of activations and weights goes through here."""
    if _product_input is not None:
        x = _product_input(x)
    return F.linear(x, w, bias)


# --------------------------------------------------------------------------------------------------
# Configuration (spec sections 3.1, 4 and 8)
# --------------------------------------------------------------------------------------------------


@dataclass
class StackConfig:
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_dim: int

    @staticmethod
    def from_json(j):
        return StackConfig(j["layers"], j["heads"], j["kv_heads"], j["head_dim"], j["ffn_dim"])


@dataclass
class LevelConfig:
    chunk_len: int  # C_l
    chunker: str  # "concat" | "linear"
    dim: int  # D_l
    prefix_len: int  # R_l
    encoder: StackConfig
    decoder: StackConfig


@dataclass
class Config:
    arch: str  # "photon" | "vanilla"
    vocab_size: int
    max_seq_len: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # photon
    embed_dim: int = 0  # D_e = D_0
    token_dim: int = 0  # D_t = E_1
    levels: List[LevelConfig] = field(default_factory=list)
    # vanilla
    dim: int = 0
    stack: Optional[StackConfig] = None

    @property
    def num_levels(self):
        return len(self.levels)

    def level(self, l):
        """Level l, 1-based as in the spec."""
        return self.levels[l - 1]

    def latent_dim(self, l):
        """D_l, with D_0 = D_e."""
        return self.embed_dim if l == 0 else self.level(l).dim

    def decoder_dim(self, l):
        """E_l: E_1 = D_t, E_l = D_{l-1} for l >= 2."""
        return self.token_dim if l == 1 else self.level(l - 1).dim

    def block_tokens(self, l):
        """B_l = C_1 ... C_l, the tokens spanned by one level-l unit (B_0 = 1)."""
        return math.prod(self.level(i).chunk_len for i in range(1, l + 1))

    @staticmethod
    def from_json(j):
        common = dict(arch=j["arch"], vocab_size=j["vocab_size"], max_seq_len=j["max_seq_len"],
                      norm_eps=float(j.get("norm_eps", 1e-5)),
                      rope_theta=float(j.get("rope_theta", 10000.0)))
        if j["arch"] == "vanilla":
            return Config(dim=j["dim"], stack=StackConfig.from_json(j), **common)
        if j["arch"] != "photon":
            raise ValueError(f"config: arch must be photon or vanilla, got {j['arch']!r}")
        levels = [LevelConfig(lj["chunk_len"], lj["chunker"], lj["dim"], lj["prefix_len"],
                              StackConfig.from_json(lj["encoder"]),
                              StackConfig.from_json(lj["decoder"])) for lj in j["levels"]]
        config = Config(embed_dim=j["embed_dim"], token_dim=j["token_dim"], levels=levels, **common)
        for l in range(1, config.num_levels + 1):
            lv = config.level(l)
            if lv.chunker == "concat" and lv.chunk_len * config.latent_dim(l - 1) != lv.dim:
                raise ValueError(f"config: levels[{l - 1}] concat chunker needs dim == "
                                 f"chunk_len * D_{l - 1}")
        return config


# --------------------------------------------------------------------------------------------------
# Building blocks (spec section 2). Inputs are [..., n, width]: the last-but-one axis is the
# sequence, any leading axes are independent sequences (e.g. a batch of decoder windows).
# --------------------------------------------------------------------------------------------------


def rms_norm(x, weight, eps):
    """RMSNorm(x; w) = x / sqrt(mean(x^2) + eps) * w."""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope(x, theta):
    """Rotate-half RoPE of x [..., n, heads, d_h] at positions 0 .. n-1."""
    n, d_h = x.shape[-3], x.shape[-1]
    half = d_h // 2
    i = torch.arange(half, dtype=torch.float64)
    theta_i = theta ** (-2.0 * i / d_h)  # theta_i = rope_theta^(-2i/d_h)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * theta_i[None, :]  # p theta_i
    cos = torch.cos(angle).to(x.dtype)[:, None, :]  # broadcast over heads
    sin = torch.sin(angle).to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]  # the pair (x_i, x_{i + d_h/2})
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    """Causal grouped-query attention with RoPE on q and k, no biases."""

    def __init__(self, width, s: StackConfig, rope_theta):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, s.head_dim
        self.rope_theta = rope_theta
        self.wq = nn.Parameter(torch.empty(s.heads * s.head_dim, width))
        self.wk = nn.Parameter(torch.empty(s.kv_heads * s.head_dim, width))
        self.wv = nn.Parameter(torch.empty(s.kv_heads * s.head_dim, width))
        self.wo = nn.Parameter(torch.empty(width, s.heads * s.head_dim))

    def forward(self, x):
        *lead, n, _ = x.shape
        q = linear(x, self.wq).reshape(*lead, n, self.heads, self.head_dim)
        k = linear(x, self.wk).reshape(*lead, n, self.kv_heads, self.head_dim)
        v = linear(x, self.wv).reshape(*lead, n, self.kv_heads, self.head_dim)
        q, k = rope(q, self.rope_theta), rope(k, self.rope_theta)
        # Query head h uses kv head floor(h / (H / H_kv)): repeat each kv head H / H_kv times.
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=-2)
        v = v.repeat_interleave(group, dim=-2)
        q, k, v = (t.transpose(-3, -2) for t in (q, k, v))  # [..., heads, n, d_h]
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # key position > query position
        scores = scores.masked_fill(future, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v  # [..., heads, n, d_h]
        out = out.transpose(-3, -2).reshape(*lead, n, self.heads * self.head_dim)
        return linear(out, self.wo)


class FeedForward(nn.Module):
    """SwiGLU: (silu(x Wgate^T) * (x Wup^T)) Wdown^T."""

    def __init__(self, width, ffn_dim):
        super().__init__()
        self.w_gate = nn.Parameter(torch.empty(ffn_dim, width))
        self.w_up = nn.Parameter(torch.empty(ffn_dim, width))
        self.w_down = nn.Parameter(torch.empty(width, ffn_dim))

    def forward(self, x):
        return linear(F.silu(linear(x, self.w_gate)) * linear(x, self.w_up), self.w_down)


class Layer(nn.Module):
    def __init__(self, width, s: StackConfig, config: Config):
        super().__init__()
        self.eps = config.norm_eps
        self.attn_norm = nn.Parameter(torch.empty(width))
        self.attn = Attention(width, s, config.rope_theta)
        self.ffn_norm = nn.Parameter(torch.empty(width))
        self.ffn = FeedForward(width, s.ffn_dim)

    def forward(self, x):
        h = x + self.attn(rms_norm(x, self.attn_norm, self.eps))
        return h + self.ffn(rms_norm(h, self.ffn_norm, self.eps))


class Stack(nn.Module):
    """Layers then a final RMSNorm, over positions 0 .. n-1 of its own input sequence."""

    def __init__(self, width, s: StackConfig, config: Config):
        super().__init__()
        self.eps = config.norm_eps
        self.width = width
        self.layers = nn.ModuleList([Layer(width, s, config) for _ in range(s.layers)])
        self.norm = nn.Parameter(torch.empty(width))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return rms_norm(x, self.norm, self.eps)


# --------------------------------------------------------------------------------------------------
# PHOTON (spec section 3)
# --------------------------------------------------------------------------------------------------


class LinearChunker(nn.Module):
    """linear chunker: proj(RMSNorm(a; chunker.norm))."""

    def __init__(self, in_width, out_width, eps):
        super().__init__()
        self.eps = eps
        self.norm = nn.Parameter(torch.empty(in_width))
        self.proj = nn.Linear(in_width, out_width, bias=True)

    def forward(self, a):
        return linear(rms_norm(a, self.norm, self.eps), self.proj.weight, self.proj.bias)


class EncoderLevel(Stack):
    """Tensors enc.{l}: the level's chunker (linear only) and its encoder stack."""

    def __init__(self, config: Config, l):
        lv = config.level(l)
        super().__init__(lv.dim, lv.encoder, config)
        self.chunk_len = lv.chunk_len
        if lv.chunker == "linear":
            self.chunker = LinearChunker(lv.chunk_len * config.latent_dim(l - 1), lv.dim,
                                         config.norm_eps)
        else:
            self.chunker = None  # concat: the identity

    def chunk(self, a):
        """chunker_l(a) for a = concat(X(l-1)_{u_1} .. X(l-1)_{u_C}) of width C_l D_{l-1}."""
        return a if self.chunker is None else self.chunker(a)


class DecoderLevel(Stack):
    """Tensors dec.{l}: the converter, the decoder stack and, at the top level, the start vector."""

    def __init__(self, config: Config, l):
        lv = config.level(l)
        width = config.decoder_dim(l)  # E_l
        super().__init__(width, lv.decoder, config)
        self.chunk_len, self.prefix_len = lv.chunk_len, lv.prefix_len
        self.converter = nn.Linear(lv.dim, lv.prefix_len * width, bias=True)
        if l == config.num_levels:
            self.start = nn.Parameter(torch.empty(lv.dim))

    def prefix(self, z):
        """P(l)_u = converter_l(z), read as R_l rows of width E_l: [..., R_l, E_l]."""
        return linear(z, self.converter.weight, self.converter.bias).reshape(
            *z.shape[:-1], self.prefix_len, self.width)

    def window_outputs(self, prefix, y):
        """Runs the window (P_1 .. P_R, y_1 .. y_k) and returns the outputs o_1 .. o_{k+1}.

        prefix [..., R, E], y [..., k, E] with k <= C - 1. o_j is the stack output at position
        R - 1 + (j - 1): it sees the prefix and y_1 .. y_{j-1} only.
        """
        out = self(torch.cat([prefix, y], dim=-2))
        return out[..., self.prefix_len - 1:, :]


class Photon(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        L = config.num_levels
        self.tok_emb_enc = nn.Parameter(torch.empty(config.vocab_size, config.embed_dim))
        self.enc = nn.ModuleDict({str(l): EncoderLevel(config, l) for l in range(1, L + 1)})
        self.dec = nn.ModuleDict({str(l): DecoderLevel(config, l) for l in range(1, L + 1)})
        self.tok_emb_dec = nn.Parameter(torch.empty(config.vocab_size, config.token_dim))
        self.lm_head = nn.Parameter(torch.empty(config.vocab_size, config.token_dim))

    def encoder(self, l) -> EncoderLevel:
        return self.enc[str(l)]

    def decoder(self, l) -> DecoderLevel:
        return self.dec[str(l)]

    def encode(self, tokens):
        """Spec 3.2. Returns X with X[l] = [M_l, D_l], the states of the complete level-l units
        (X[0] = the token embeddings)."""
        X = [self.tok_emb_enc[torch.as_tensor(tokens, dtype=torch.long)]]
        for l in range(1, self.config.num_levels + 1):
            enc = self.encoder(l)
            C, below = enc.chunk_len, X[l - 1]
            M = below.shape[0] // C  # complete level-l units
            a = enc.chunk(below[:M * C].reshape(M, C * below.shape[1]))  # children in order
            X.append(enc(a))
        return X

    def forward(self, tokens):
        """Teacher-forced pass (spec 3.2-3.3) over tokens[0 .. T-1].

        Returns (logits, X, Xhat): logits [T + 1, V] where row p is the distribution of the token at
        0-based position p given tokens[:p] (row 0 is BOS's, never scored; row T is the next token);
        X the encoder states (see `encode`); Xhat[l] (l = 1 .. L-1; Xhat[0] is None) the
        reconstructions Xhat(l) of every level-l unit the level-(l+1) windows reached, for the
        recursive loss (its children of complete level-(l+1) units are the first M_{l+1} C_{l+1}).
        """
        cfg = self.config
        L, T = cfg.num_levels, len(tokens)
        X = self.encode(tokens)
        # Positions 0 .. T each need a distribution, so the level-l units touched are those holding
        # any of T + 1 positions: n_units[0] = T + 1, n_units[l] = ceil(n_units[l-1] / C_l).
        n_units = [T + 1]
        for l in range(1, L + 1):
            n_units.append(-(-n_units[l - 1] // cfg.level(l).chunk_len))
        # Top-level conditioners: z(L)_1 = start, z(L)_u = XL_{u-1}. n_units[L] = M_L + 1 exactly.
        dec_top = self.decoder(L)
        z = torch.cat([dec_top.start[None, :], X[L]], dim=0)
        assert z.shape[0] == n_units[L]
        Xhat = [None] * L
        for l in range(L, 0, -1):
            dec = self.decoder(l)
            C, U = dec.chunk_len, n_units[l]
            # y_j of unit u is child (u-1)C + j: the decoder token embedding at level 1, the
            # child's encoder state above. Only complete children have one; the missing inputs of
            # the last (partial) unit are zero-filled, which no kept output can see (causality).
            y = self.tok_emb_dec[torch.as_tensor(tokens, dtype=torch.long)] if l == 1 else X[l - 1]
            y = torch.cat([y, y.new_zeros(U * C - y.shape[0], y.shape[1])], dim=0)
            y = y.reshape(U, C, -1)[:, :C - 1]
            out = dec.window_outputs(dec.prefix(z), y)  # [U, C, E_l]
            out = out.reshape(U * C, -1)[:n_units[l - 1]]  # keep the children that exist
            if l >= 2:
                Xhat[l - 1] = out  # conditioners of the level-(l-1) units
                z = out
            else:
                logits = linear(out, self.lm_head)
        return logits, X, Xhat

    def next_logits(self, tokens):
        """p(next token | tokens): the last row of the teacher-forced pass."""
        return self(tokens)[0][-1]


# --------------------------------------------------------------------------------------------------
# Vanilla (spec section 4)
# --------------------------------------------------------------------------------------------------


class Vanilla(Stack):
    def __init__(self, config: Config):
        super().__init__(config.dim, config.stack, config)
        self.config = config
        self.tok_emb = nn.Parameter(torch.empty(config.vocab_size, config.dim))
        self.lm_head = nn.Parameter(torch.empty(config.vocab_size, config.dim))

    def forward(self, tokens):
        """h = S(tok_emb[t_1 .. t_T]); returns [T, V], row i being p(tokens[i+1] | tokens[:i+1])."""
        h = Stack.forward(self, self.tok_emb[torch.as_tensor(tokens, dtype=torch.long)])
        return linear(h, self.lm_head)

    def next_logits(self, tokens):
        return self(tokens)[-1]


# --------------------------------------------------------------------------------------------------
# Loading, teacher forcing and scoring
# --------------------------------------------------------------------------------------------------


def build_model(config: Config):
    return Photon(config) if config.arch == "photon" else Vanilla(config)


def load_model(config_path, weights_path, dtype=torch.float64):
    """Builds the model of config.json and loads weights.npz (spec section 8) into it."""
    with open(config_path) as f:
        config = Config.from_json(json.load(f))
    model = build_model(config).to(dtype)
    with np.load(weights_path) as npz:
        state = {name: torch.from_numpy(npz[name].astype(np.float64)) for name in npz.files}
    model.load_state_dict(state, strict=True)  # every tensor of spec section 6, and no other
    return model.requires_grad_(False).eval()


def teacher_forced_logits(model, tokens):
    """[T, V]: row i is the distribution of the token after tokens[:i+1] (see module docstring)."""
    with torch.no_grad():
        if isinstance(model, Vanilla):
            return model(tokens)
        return model(tokens)[0][1:]  # drop BOS's own distribution


def score(model, tokens):
    """[None, log p(t_1 | t_0), ..., log p(t_{T-1} | t_<T-1)] (0-based), as Python floats."""
    logprobs = torch.log_softmax(teacher_forced_logits(model, tokens), dim=-1)
    return [None] + [float(logprobs[i - 1, tokens[i]]) for i in range(1, len(tokens))]
