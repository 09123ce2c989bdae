#include "engine/weights.h"

#include "core/error.h"

namespace photon {

namespace {

class Binder {
 public:
  Binder(const ModelFile& file, Backend& backend) : file_(file), backend_(backend) {}

  Tensor get(const std::string& name) {
    const TensorEntry* t = file_.find(name);
    if (!t) fail(PHOTON_ERR_TENSOR_SET, file_.path() + ": tensor '" + name + "' is missing");
    // Vectors are one row; a matrix is [shape[0], rest].
    int64_t rows = t->shape.size() > 1 ? t->shape[0] : 1, cols = 1;
    for (size_t i = t->shape.size() > 1 ? 1 : 0; i < t->shape.size(); ++i) cols *= t->shape[i];
    return backend_.weight({t->data, t->dtype, rows, cols}, name);
  }

  StackWeights stack(const std::string& prefix, const StackConfig& config, int dim) {
    StackWeights s;
    s.config = config;
    s.dim = dim;
    for (int i = 0; i < config.layers; ++i) {
      const std::string p = prefix + "layers." + std::to_string(i) + ".";
      s.layers.push_back({get(p + "attn_norm"), get(p + "attn.wq"), get(p + "attn.wk"),
                          get(p + "attn.wv"), get(p + "attn.wo"), get(p + "ffn_norm"),
                          get(p + "ffn.w_gate"), get(p + "ffn.w_up"), get(p + "ffn.w_down")});
    }
    s.norm = get(prefix + "norm");
    return s;
  }

 private:
  const ModelFile& file_;
  Backend& backend_;
};

}  // namespace

std::unique_ptr<Weights> Weights::bind(const ModelFile& file, Backend& backend) {
  auto w = std::make_unique<Weights>();
  Binder b(file, backend);
  const ModelConfig& c = file.config();
  if (c.arch == Arch::Vanilla) {
    w->tok_emb = b.get("tok_emb");
    w->stack = b.stack("", c.stack, c.dim);
    w->lm_head = b.get("lm_head");
    return w;
  }
  const int L = c.num_levels();
  w->tok_emb_enc = b.get("tok_emb_enc");
  w->levels.resize(L);
  for (int l = 1; l <= L; ++l) {
    LevelWeights& lw = w->levels[l - 1];
    const LevelConfig& lc = c.level(l);
    const std::string enc = "enc." + std::to_string(l) + ".";
    if (lc.chunker == ChunkerKind::Linear) {
      lw.chunker_norm = b.get(enc + "chunker.norm");
      lw.chunker_w = b.get(enc + "chunker.proj.weight");
      lw.chunker_b = b.get(enc + "chunker.proj.bias");
    }
    lw.encoder = b.stack(enc, lc.encoder, lc.dim);
    const std::string dec = "dec." + std::to_string(l) + ".";
    lw.converter_w = b.get(dec + "converter.weight");
    lw.converter_b = b.get(dec + "converter.bias");
    lw.decoder = b.stack(dec, lc.decoder, c.decoder_dim(l));
  }
  w->start = b.get("dec." + std::to_string(L) + ".start");
  w->tok_emb_dec = b.get("tok_emb_dec");
  w->lm_head = b.get("lm_head");
  return w;
}

}  // namespace photon
