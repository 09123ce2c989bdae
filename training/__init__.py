"""Training of PHOTON, Block and vanilla models on the KJV corpus (docs/quality.md).

corpus    the corpus (KJV from Debian's bible-kjv-text), its splits and the split-aware tokenizer
model     batched float32 training modules built on photon_ref (spec-exact), init and the loss
train     the trainer: AdamW, warm-up + cosine decay, checkpoints, resuming, logs
export    checkpoint -> config.json + model.safetensors (spec section 8) -> .photon via
          `photon convert --from`; safetensors files without the package (training.safetensors)
evaluate  quality, agreement, throughput and KV bytes measured through the SDK
plot      training curves for docs/quality.md

Run from the repository root with PYTHONPATH=python:. and Debian's /usr/bin/python3.
"""
