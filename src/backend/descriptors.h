// The descriptors of the backend's ops: one type per concept, shared by the Backend interface
// (backend.h) and the kernels of every backend. A descriptor names memory in one of two forms: as
// Tensors at the interface, whose ops check them against their contract, or as plain addresses
// beneath it, once a backend has resolved them (a CUDA kernel reads its descriptors from device
// memory, where no Tensor can go). A concept needed in both forms is one template over the form,
// so that its fields and their meaning are written once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/tensor.h"
#include "core/dtype.h"
#include "core/sampling.h"

namespace photon {

// A weight as it lies in the model file's mapping: [rows, cols] of `dtype`.
struct HostWeight {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// A weight matrix [out, in], row-major, of `dtype` (f32, bf16 or f16) at an address in a
// backend's memory: a weight Tensor as the kernels take it.
struct WeightMatrix {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int out = 0;
  int in = 0;
};

// One product of a group (linear_group): y[n, w's out] (+)= x[n, w's in] . w^T, y f32;
// accumulate adds the product to y instead of storing it.
template <class Weight, class Output>
struct BasicProduct {
  Weight w{};
  Output y{};
  bool accumulate = false;
};
using LinearOut = BasicProduct<Tensor, Tensor>;      // the interface: w as weight() returned it
using Product = BasicProduct<WeightMatrix, float*>;  // the kernels

// Query heads and the key/value heads they share (heads / kv_heads query heads read each one).
struct AttentionShape {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;

  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
};

// Rows [row0, row0 + rows) of the query (and new key/value) matrix continue one sequence whose
// cache for one layer is k, v [capacity, kv_dim]: they take positions start .. start + rows - 1
// and attend causally to positions 0 .. their own. The interface names the caches as Tensors
// (f32, bf16 or f16, both of one type); the CUDA kernels by their device addresses, the type
// passed beside them.
template <class Cache>
struct BasicAttentionSegment {
  int row0 = 0;
  int rows = 0;
  int start = 0;
  Cache k{};
  Cache v{};
};
using AttentionSegment = BasicAttentionSegment<Tensor>;

// dst and src have the same shape and dtype (any number of rows); they may live in different
// buffers of one backend.
struct RowCopy {
  Tensor dst;
  Tensor src;
};

// One row of logits to sample: the settings, the position (the counter of the random draw), the
// history the penalties look at, and where the row's config->top_logprobs most likely ids go
// (null: nowhere).
struct SampleRequest {
  const SamplerConfig* config = nullptr;
  int64_t position = 0;
  std::span<const int32_t> history;
  std::vector<TokenLogprob>* top = nullptr;
};

// Where Backend::logprobs writes each row's k most likely ids and their log-probabilities: row i
// at ids + i * k and logprobs + i * k. k == 0: nowhere.
struct TopRows {
  int k = 0;
  int32_t* ids = nullptr;
  float* logprobs = nullptr;
  // The rows from `rows` on.
  TopRows from(int64_t rows) const {
    if (k == 0) return {};
    return {k, ids + rows * k, logprobs + rows * k};
  }
};

}  // namespace photon
