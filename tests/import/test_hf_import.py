#!/usr/bin/python3
"""`photon convert --from` on safetensors checkpoints, against an independent PyTorch forward pass.

Hugging Face checkpoints: small random LlamaForCausalLM / MistralForCausalLM models written in the
Hugging Face layout (config.json, model.safetensors or shards with model.safetensors.index.json,
tokenizer.model = tests/data/tiny.model): grouped and plain KV heads, tied and untied embeddings,
bf16, f16 and f32 tensors, an explicit head_dim, a vocabulary wider than the tokenizer. Each is
converted, and `photon score --json` / `photon generate --json` are compared with the Hugging Face
LLaMA forward pass written out below in float64 (rotate_half RoPE on q_proj / k_proj rows as
stored, repeat_kv, RMSNorm, SwiGLU; not python/photon_ref): log-probabilities within 1e-4, greedy
tokens equal. The metadata must record the source and config.json's SHA-256.

The trainer's output: a PHOTON model's weights written by training.export.write_interchange
(config.json + model.safetensors, the SDK's names) convert with --from to the same model as the
same weights as weights.npz through --config / --weights (identical log-probabilities); and
training.safetensors reads back what it writes, in f32, f16 and bf16.

Refusals: a checkpoint without tokenizer.model, and a refused config field, fail with exit code 1
and a message naming them (every field is tested in tests/unit/test_checkpoint_import.cpp);
--from with --weights is a usage error (exit code 2).

    PYTHONPATH=python:. /usr/bin/python3 tests/import/test_hf_import.py \
        --photon build/bin/photon --work-dir /tmp/import
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, ROOT)
from training.safetensors import load_file, save_file  # noqa: E402

TOLERANCE = 1e-4
MIN_MARGIN = 1e-3  # a greedy step closer than this to a tie would make the comparison flaky
TOKENIZER = os.path.join(ROOT, "tests", "data", "tiny.model")
TOKENIZER_PIECES = 320  # tests/data/tiny.model
BOS, EOS = 1, 2  # its ids of <s> and </s>


class Mismatch(Exception):
    pass


# ---- the Hugging Face LLaMA forward pass, float64 ---------------------------------------------

def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def hf_logits(w, cfg, ids):
    """[T, vocab] logits of LlamaForCausalLM / MistralForCausalLM (window covering the context)
    over token ids, from the checkpoint's tensors w (float64) under its config.json cfg."""
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    d = cfg.get("head_dim") or cfg["hidden_size"] // heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    T = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, heads, d).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, kv_heads, d).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, kv_heads, d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # repeat_kv: KV head j serves query heads j * n_rep .. (j + 1) * n_rep - 1.
        n_rep = heads // kv_heads
        k = k[:, None].expand(kv_heads, n_rep, T, d).reshape(heads, T, d)
        v = v[:, None].expand(kv_heads, n_rep, T, d).reshape(heads, T, d)
        attn = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d) + mask, dim=-1) @ v
        x = x + attn.transpose(0, 1).reshape(T, heads * d) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def hf_logprobs(w, cfg, ids):
    """log p(ids[i] | ids[:i]) for i >= 1."""
    lp = torch.log_softmax(hf_logits(w, cfg, ids), dim=-1)
    return [float(lp[i - 1, ids[i]]) for i in range(1, len(ids))]


def hf_greedy(w, cfg, prompt, n):
    """n greedy tokens after prompt, and the smallest top-1 / top-2 logit gap on the way."""
    ids, margins = list(prompt), []
    for _ in range(n):
        last = hf_logits(w, cfg, ids)[-1]
        top = torch.topk(last, 2)
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(int(top.indices[0]))
    return ids[len(prompt):], min(margins)


# ---- writing checkpoints in the Hugging Face layout ------------------------------------------

def hf_config(arch, hidden, layers, heads, inter, vocab, **extra):
    cfg = {"architectures": [arch], "model_type": "mistral" if "Mistral" in arch else "llama",
           "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
           "num_attention_heads": heads, "vocab_size": vocab, "hidden_act": "silu",
           "bos_token_id": BOS, "eos_token_id": EOS, "torch_dtype": "bfloat16"}
    cfg.update(extra)
    return cfg


def random_checkpoint(cfg, seed, dtype_of):
    """{hf name: tensor in its stored dtype}: matrices normal(0, 1/sqrt(in)), embeddings
    normal(0, 1), norms 1 + normal(0, 0.2) (so that a swapped norm shows); dtype_of(name) picks
    the dtype."""
    g = torch.Generator().manual_seed(seed)
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    d = cfg.get("head_dim") or cfg["hidden_size"] // heads
    D, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]

    def matrix(rows, cols):
        return torch.randn(rows, cols, generator=g) / math.sqrt(cols)

    def norm():
        return 1 + 0.2 * torch.randn(D, generator=g)

    t = {"model.embed_tokens.weight": torch.randn(V, D, generator=g)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm()
        t[p + "self_attn.q_proj.weight"] = matrix(heads * d, D)
        t[p + "self_attn.k_proj.weight"] = matrix(kv * d, D)
        t[p + "self_attn.v_proj.weight"] = matrix(kv * d, D)
        t[p + "self_attn.o_proj.weight"] = matrix(D, heads * d)
        t[p + "post_attention_layernorm.weight"] = norm()
        t[p + "mlp.gate_proj.weight"] = matrix(F, D)
        t[p + "mlp.up_proj.weight"] = matrix(F, D)
        t[p + "mlp.down_proj.weight"] = matrix(D, F)
    t["model.norm.weight"] = norm()
    if not cfg.get("tie_word_embeddings"):
        t["lm_head.weight"] = matrix(V, D)
    return {name: value.to(dtype_of(name)) for name, value in t.items()}


def write_checkpoint(directory, cfg, tensors, shards, extra=None):
    """config.json, tokenizer.model and the tensors (plus `extra` ones) as model.safetensors
    (shards == 1) or model-0000k-of-0000n.safetensors + model.safetensors.index.json."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.copy(TOKENIZER, os.path.join(directory, "tokenizer.model"))
    everything = {**tensors, **(extra or {})}
    names = list(everything)
    if shards == 1:
        save_file(everything, os.path.join(directory, "model.safetensors"), {"format": "pt"})
        return
    weight_map, total = {}, 0
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: everything[n] for n in names[k::shards]}
        save_file(part, os.path.join(directory, file), {"format": "pt"})
        for n, t in part.items():
            weight_map[n] = file
            total += t.numel() * t.element_size()
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


# ---- the CLI -----------------------------------------------------------------------------------

def run(args, expect_ok=True):
    result = subprocess.run([str(a) for a in args], capture_output=True)
    if expect_ok and result.returncode != 0:
        raise Mismatch(f"{' '.join(map(str, args))} exited with {result.returncode}:\n"
                       f"{result.stderr.decode(errors='replace')}")
    return result


def score(photon, model, ids):
    out = run([photon, "score", "-m", model, "--tokens", ",".join(map(str, ids)), "--json"])
    return json.loads(out.stdout)["logprobs"][1:]


def generate(photon, model, prompt, n):
    out = run([photon, "generate", "-m", model, "--tokens", ",".join(map(str, prompt)), "-n", n,
               "--ignore-eos", "--json"])
    return json.loads(out.stdout.decode(errors="replace").strip().splitlines()[-1])["tokens"]


def compare(what, got, expected):
    worst = max(abs(a - b) for a, b in zip(got, expected))
    if len(got) != len(expected) or worst > TOLERANCE:
        raise Mismatch(f"{what}: log-probabilities differ by {worst:.2e} (> {TOLERANCE})")
    return worst


# ---- the cases ---------------------------------------------------------------------------------

CASES = [
    # Grouped KV heads, bf16, three shards, untied, rope_theta and rms_norm_eps given, and the
    # rotary_emb.inv_freq buffers older checkpoints carry (the engine derives them).
    {"name": "llama-gqa-bf16-sharded", "seed": 11, "shards": 3, "dtypes": ["f32", "bf16"],
     "config": hf_config("LlamaForCausalLM", 64, 2, 4, 96, TOKENIZER_PIECES,
                         num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5,
                         max_position_embeddings=256, tie_word_embeddings=False),
     "dtype_of": lambda name: torch.bfloat16, "inv_freq": True},
    # Tied embeddings, one KV head, head_dim given (heads * head_dim != hidden_size), f32, one
    # file, a vocabulary wider than the tokenizer, defaults for rope_theta and rms_norm_eps.
    {"name": "llama-tied-f32", "seed": 12, "shards": 1, "dtypes": ["f32"],
     "config": hf_config("LlamaForCausalLM", 48, 2, 4, 80, TOKENIZER_PIECES + 32,
                         num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                         max_position_embeddings=128),
     "dtype_of": lambda name: torch.float32},
    # Mistral without a sliding window, f16 matrices with f32 norms, two shards.
    {"name": "mistral-f16-mixed", "seed": 13, "shards": 2, "dtypes": ["f32"],
     "config": hf_config("MistralForCausalLM", 32, 3, 2, 64, TOKENIZER_PIECES,
                         num_key_value_heads=2, sliding_window=None, rope_theta=10000.0,
                         rms_norm_eps=1e-6, max_position_embeddings=64),
     "dtype_of": lambda name: torch.float32 if name.endswith("norm.weight") else torch.float16},
]


def check_case(case, photon, work):
    cfg = case["config"]
    directory = os.path.join(work, case["name"])
    tensors = random_checkpoint(cfg, case["seed"], case["dtype_of"])
    extra = {}
    if case.get("inv_freq"):
        d = cfg["hidden_size"] // cfg["num_attention_heads"]
        inv = 1.0 / cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
        extra = {f"model.layers.{i}.self_attn.rotary_emb.inv_freq": inv
                 for i in range(cfg["num_hidden_layers"])}
    write_checkpoint(directory, cfg, tensors, case["shards"], extra)
    w = {name: t.to(torch.float64) for name, t in tensors.items()}

    rng = np.random.default_rng(case["seed"])
    ids = [BOS] + [int(i) for i in rng.integers(3, cfg["vocab_size"], size=30)]
    expected = hf_logprobs(w, cfg, ids)
    prompt = ids[:5]
    greedy, margin = hf_greedy(w, cfg, prompt, 12)
    if margin <= MIN_MARGIN:
        raise Mismatch(f"{case['name']}: the reference's greedy path nears a tie; choose another "
                       f"seed")
    config_hash = hashlib.sha256(open(os.path.join(directory, "config.json"), "rb").read())
    for dtype in case["dtypes"]:
        model = os.path.join(work, f"{case['name']}-{dtype}.photon")
        run([photon, "convert", "--from", directory, "--dtype", dtype, "-o", model])
        worst = compare(f"{case['name']} ({dtype})", score(photon, model, ids), expected)
        got = generate(photon, model, prompt, 12)
        if got != greedy:
            raise Mismatch(f"{case['name']} ({dtype}): greedy tokens {got}, the reference's "
                           f"{greedy}")
        info = json.loads(run([photon, "inspect", model, "--json"]).stdout)
        meta = info["metadata"]
        if (meta.get("source") != case["name"] or
                meta.get("source.config_sha256") != config_hash.hexdigest() or
                meta.get("source.format") != "safetensors, Hugging Face " +
                cfg["architectures"][0]):
            raise Mismatch(f"{case['name']}: metadata {meta}")
        print(f"{case['name']} ({dtype}): log-probabilities within {worst:.1e}, "
              f"{len(greedy)} greedy tokens equal")


def check_trainer_output(photon, work):
    """training.export.write_interchange's directory converts with --from to what the same
    weights give through weights.npz."""
    from photon_ref.model import Config
    from training.export import write_interchange
    from training.model import build_train_model, init_weights

    stack = {"layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 4, "ffn_dim": 12}
    model_json = {"arch": "photon", "vocab_size": TOKENIZER_PIECES, "embed_dim": 4,
                  "token_dim": 8, "norm_eps": 1e-5, "rope_theta": 10000.0, "max_seq_len": 64,
                  "levels": [{"chunk_len": 2, "chunker": "concat", "dim": 8, "prefix_len": 1,
                              "encoder": stack, "decoder": stack},
                             {"chunk_len": 2, "chunker": "linear", "dim": 6, "prefix_len": 2,
                              "encoder": stack, "decoder": stack}]}
    model = build_train_model(Config.from_json(model_json))
    init_weights(model, 5)
    directory = os.path.join(work, "trainer-final")
    shutil.rmtree(directory, ignore_errors=True)
    write_interchange(model, model_json, directory, tokenizer=TOKENIZER)
    npz = os.path.join(work, "trainer-weights.npz")
    np.savez(npz, **{k: v.detach().to(torch.float32).numpy()
                     for k, v in model.state_dict().items()})
    from_safetensors = os.path.join(work, "trainer-from.photon")
    from_npz = os.path.join(work, "trainer-npz.photon")
    run([photon, "convert", "--from", directory, "-o", from_safetensors])
    run([photon, "convert", "--config", os.path.join(directory, "config.json"), "--weights", npz,
         "--tokenizer", TOKENIZER, "-o", from_npz])
    ids = [BOS] + list(range(40, 60))
    a, b = score(photon, from_safetensors, ids), score(photon, from_npz, ids)
    # load_file (init_from, training.recgen_quality) reads back what was written, in every dtype.
    state = model.state_dict()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        path = os.path.join(work, "round-trip.safetensors")
        save_file({k: v.detach().to(dtype) for k, v in state.items()}, path)
        back = load_file(path)
        if list(back) != list(state) or any(
                back[k].dtype != dtype or not torch.equal(back[k], state[k].detach().to(dtype))
                for k in state):
            raise Mismatch(f"training.safetensors: a {dtype} round trip changes the tensors")
    if a != b:
        raise Mismatch(f"trainer output: --from gives {a[:4]}..., the npz {b[:4]}...")
    print(f"trainer output: --from and --weights give the same {len(a)} log-probabilities")


def check_refusals(photon, work):
    base = CASES[0]
    directory = os.path.join(work, "refused")
    cfg = dict(base["config"], rope_scaling={"rope_type": "linear", "factor": 2.0})
    write_checkpoint(directory, cfg, random_checkpoint(base["config"], 1, base["dtype_of"]), 1)
    out = os.path.join(work, "refused.photon")
    result = run([photon, "convert", "--from", directory, "-o", out], expect_ok=False)
    message = result.stderr.decode(errors="replace")
    if (result.returncode != 1 or 'rope_scaling of type "linear"' not in message or
            "PHOTON_ERR_UNSUPPORTED" not in message):
        raise Mismatch(f"rope_scaling: exit {result.returncode}, message {message!r}")
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(base["config"], f)
    os.remove(os.path.join(directory, "tokenizer.model"))
    result = run([photon, "convert", "--from", directory, "-o", out], expect_ok=False)
    message = result.stderr.decode(errors="replace")
    if result.returncode != 1 or "no tokenizer.model" not in message:
        raise Mismatch(f"no tokenizer: exit {result.returncode}, message {message!r}")
    if os.path.exists(out):
        raise Mismatch("a refused conversion left a file")
    result = run([photon, "convert", "--from", directory, "--weights", "w.npz", "-o", out],
                 expect_ok=False)
    message = result.stderr.decode(errors="replace")
    if result.returncode != 2 or "give --from or --weights, not both" not in message:
        raise Mismatch(f"--from with --weights: exit {result.returncode}, message {message!r}")
    print("refusals: rope_scaling, a missing tokenizer.model and --from with --weights are named")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photon", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    torch.manual_seed(0)
    try:
        for case in CASES:
            check_case(case, args.photon, args.work_dir)
        check_trainer_output(args.photon, args.work_dir)
        check_refusals(args.photon, args.work_dir)
    except Mismatch as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
