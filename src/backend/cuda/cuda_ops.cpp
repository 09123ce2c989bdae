// The CUDA backend's ops (spec section 2) and its results for the host, over the kernels of this
// folder. Every op stages its host tables (ids, positions, segments, sampler settings) into the
// scratch arena and launches on the backend's stream; nothing here waits for the device except
// sample and logprobs, whose results the host needs.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/kv_append.h"
#include "backend/cuda/logprob.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/sample.h"
#include "backend/cuda/swiglu.h"

namespace photon::cuda {

namespace {

// Segments shorter than this go to the row kernel (decode, local windows), longer ones to the
// tiled kernel (prefill): a tile of kAttentionTileRows rows is then at least half used.
constexpr int kTiledMinRows = kAttentionTileRows / 2;
// Rows sampled per launch: the sampler's workspace is about 650 KiB per row at V = 32000.
constexpr int kSampleRows = 128;

// The kernels count rows, columns and elements of a row in int.
int as_int(int64_t value) {
  check(value >= 0 && value <= INT32_MAX, PHOTON_ERR_UNSUPPORTED,
        "CUDA backend: a size beyond 32 bits (" + std::to_string(value) + ")");
  return static_cast<int>(value);
}

// A weight tensor as the kernels take it.
WeightMatrix matrix(const Tensor& w) {
  return {address(w), w.dtype, as_int(w.rows), as_int(w.cols)};
}

template <class T>
size_t bytes_of(size_t count) {
  return count * sizeof(T);
}

}  // namespace

void CudaBackend::do_embed(const Tensor& table, std::span<const int32_t> ids, const Tensor& out) {
  if (ids.empty()) return;
  Lock lock(*this, "embed");
  reserve_scratch(ids.size_bytes(), 1);
  ArenaScope scope(scratch_);
  const int32_t* staged = stage(ids, "token ids");
  embedding(address(table), table.dtype, as_int(table.rows), as_int(table.cols), staged,
            as_int(out.rows), f32(out), stream());
}

void CudaBackend::do_rmsnorm(const Tensor& x, const Tensor& w, const Tensor& y, float eps) {
  if (x.rows == 0) return;
  Lock lock(*this, "rmsnorm");
  cuda::rmsnorm(f32(x), f32(w), f32(y), as_int(x.rows), as_int(x.cols), eps, stream());
}

void CudaBackend::do_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                            bool accumulate) {
  if (x.rows == 0 || w.rows == 0) return;
  Lock lock(*this, "linear");
  lock.shape({x.rows, w.rows, w.cols});
  const WeightMatrix weights = matrix(w);
  reserve_scratch(gemm_->scratch_bytes(as_int(x.rows), weights), 2);
  gemm_->linear(f32(x), as_int(x.rows), weights, bias ? f32(*bias) : nullptr, f32(y), accumulate,
                scratch_, stream());
}

void CudaBackend::do_linear_group(const Tensor& x, std::span<const LinearOut> outs) {
  if (x.rows == 0) return;
  Lock lock(*this, "linear_group");
  std::vector<Product> products;
  products.reserve(outs.size());
  for (const LinearOut& o : outs) {
    if (o.w.rows == 0) continue;
    products.push_back({matrix(o.w), f32(o.y), o.accumulate});
  }
  if (products.empty()) return;
  int64_t outputs = 0;
  for (const Product& p : products) outputs += p.w.out;
  lock.shape({x.rows, outputs, x.cols});
  reserve_scratch(gemm_->scratch_bytes(as_int(x.rows), products), 2);
  gemm_->linear_group(f32(x), as_int(x.rows), products, scratch_, stream());
}

void CudaBackend::do_rope_table(std::span<const int64_t> positions, int head_dim, float theta,
                                const Tensor& table) {
  if (positions.empty()) return;
  Lock lock(*this, "rope_table");
  const int n = as_int(static_cast<int64_t>(positions.size())), half = head_dim / 2;
  const std::vector<double> inv_freq = rope_inv_freq(head_dim, theta);
  reserve_scratch(positions.size_bytes() + bytes_of<double>(inv_freq.size()), 2);
  ArenaScope scope(scratch_);
  const int64_t* staged_positions = stage(positions, "RoPE positions");
  const double* staged_inv_freq = stage(std::span<const double>(inv_freq), "RoPE frequencies");
  // The table is [2n, half]: the cosines of the n rows, then their sines (as cpu::rope_table).
  float* cos = f32(table);
  cuda::rope_table(staged_positions, n, staged_inv_freq, half, cos,
                   cos + static_cast<size_t>(n) * half, stream());
}

void CudaBackend::do_rope(const Tensor& x, int heads, const Tensor& table) {
  if (x.rows == 0) return;
  Lock lock(*this, "rope");
  const int head_dim = as_int(x.cols) / heads, half = head_dim / 2;
  float* cos = f32(table);
  rope_apply(f32(x), as_int(x.rows), heads, head_dim, cos, cos + static_cast<size_t>(x.rows) * half,
             stream());
}

void CudaBackend::do_swiglu(const Tensor& gate, const Tensor& up) {
  if (gate.rows == 0) return;
  Lock lock(*this, "swiglu");
  cuda::swiglu(f32(gate), f32(up), static_cast<size_t>(gate.rows) * gate.cols, stream());
}

namespace {

// The KV cache types among the segments, each once: sessions of different kv types batched
// together take one launch of each kernel per type.
std::vector<DType> kv_types(std::span<const AttentionSegment> segments) {
  std::vector<DType> types;
  for (const AttentionSegment& s : segments)
    if (std::find(types.begin(), types.end(), s.k.dtype) == types.end()) types.push_back(s.k.dtype);
  return types;
}

// The kernels' segments of one KV type: device addresses, and only segments that have rows.
std::vector<DeviceSegment> device_segments(std::span<const AttentionSegment> segments,
                                           DType kv_dtype) {
  std::vector<DeviceSegment> out;
  out.reserve(segments.size());
  for (const AttentionSegment& s : segments)
    if (s.rows > 0 && s.k.dtype == kv_dtype)
      out.push_back({s.row0, s.rows, s.start, address(s.k), address(s.v)});
  return out;
}

}  // namespace

void CudaBackend::do_kv_append(const Tensor& k, const Tensor& v,
                               std::span<const AttentionSegment> segments) {
  Lock lock(*this, "kv_append");
  for (const DType kv_dtype : kv_types(segments)) {
    const std::vector<DeviceSegment> segs = device_segments(segments, kv_dtype);
    if (segs.empty()) continue;
    reserve_scratch(bytes_of<DeviceSegment>(segs.size()), 1);
    ArenaScope scope(scratch_);
    const DeviceSegment* staged = stage(std::span<const DeviceSegment>(segs), "KV segments");
    kv_append_launch(f32(k), f32(v), as_int(k.cols), kv_dtype, staged,
                     static_cast<int>(segs.size()), as_int(k.rows), stream());
  }
}

void CudaBackend::do_attention(const Tensor& q, const AttentionShape& shape,
                               std::span<const AttentionSegment> segments, const Tensor& out) {
  Lock lock(*this, "attention");
  lock.shape({q.rows, static_cast<int64_t>(segments.size())});
  for (const DType kv_dtype : kv_types(segments)) {
    const std::vector<DeviceSegment> segs = device_segments(segments, kv_dtype);
    if (!segs.empty()) attention_of_type(q, shape, kv_dtype, segs, out);
  }
}

void CudaBackend::attention_of_type(const Tensor& q, const AttentionShape& s, DType kv_dtype,
                                    std::span<const DeviceSegment> segs, const Tensor& out) {
  // Long segments (prefill) to the tiled kernel, short ones (decode, windows) to the row kernel;
  // each kernel leaves the other's rows alone.
  const bool tiled = attention_tiled_supports(s);
  std::vector<DeviceSegment> rows, longs;
  std::vector<AttentionTile> tiles;
  int max_keys = 0, short_rows = 0;
  for (const DeviceSegment& seg : segs) {
    if (tiled && seg.rows >= kTiledMinRows) {
      for (int first = 0; first < seg.rows; first += kAttentionTileRows)
        tiles.push_back({static_cast<int>(longs.size()), first});
      longs.push_back(seg);
    } else {
      rows.push_back(seg);
      max_keys = std::max(max_keys, seg.start + seg.rows);
      short_rows += seg.rows;
    }
  }
  // The row kernel's grid spans every row (those of long segments leave at once); its partials
  // are indexed by row.
  const int n_rows = as_int(q.rows);
  const int splits = rows.empty() ? 1
                                  : attention_splits(short_rows, s.heads, max_keys,
                                                     device_.info().multiprocessors);
  const size_t partials = attention_partials_bytes(n_rows, s.heads, s.head_dim, splits);
  reserve_scratch(
      bytes_of<DeviceSegment>(segs.size()) + bytes_of<AttentionTile>(tiles.size()) + partials, 4);
  ArenaScope scope(scratch_);
  if (!longs.empty()) {
    const DeviceSegment* staged =
        stage(std::span<const DeviceSegment>(longs), "attention segments");
    const AttentionTile* staged_tiles =
        stage(std::span<const AttentionTile>(tiles), "attention tiles");
    attention_tiled_launch(f32(q), s, kv_dtype, staged, staged_tiles,
                           static_cast<int>(tiles.size()), f32(out), stream());
  }
  if (!rows.empty()) {
    const DeviceSegment* staged = stage(std::span<const DeviceSegment>(rows), "attention segments");
    float* scratch =
        splits > 1 ? static_cast<float*>(scratch_.take_bytes(partials, "partials")) : nullptr;
    attention_launch(f32(q), s, kv_dtype, staged, static_cast<int>(rows.size()), n_rows, splits,
                     scratch, f32(out), stream());
  }
}

void CudaBackend::do_sample(const Tensor& logits, std::span<const SampleRequest> rows,
                            int32_t* tokens, float* logprobs) {
  if (rows.empty()) return;
  Lock lock(*this, "sample");
  const int n = as_int(static_cast<int64_t>(rows.size())), vocab = as_int(logits.cols);
  std::vector<SampleParams> params;
  params.reserve(rows.size());
  int recent_stride = 0;
  std::vector<LogitBias> bias;  // every row's entries, one after another
  for (const SampleRequest& r : rows) {
    params.push_back(make_sample_params(*r.config, r.position, r.history.size(),
                                        as_int(static_cast<int64_t>(bias.size()))));
    recent_stride = std::max(recent_stride, params.back().recent_len);
    bias.insert(bias.end(), r.config->logit_bias.begin(), r.config->logit_bias.end());
  }
  // Each row's penalty window: the last recent_len tokens of its history.
  std::vector<int32_t> recent(static_cast<size_t>(n) * recent_stride, 0);
  for (int i = 0; i < n; ++i) {
    const std::span<const int32_t> h = rows[i].history;
    std::copy(h.end() - params[i].recent_len, h.end(),
              recent.begin() + static_cast<ptrdiff_t>(i) * recent_stride);
  }
  // Rows that need the sampler's workspace (640 KiB each at a 32K vocabulary) go kSampleRows at
  // a time; batches without them go in one launch.
  const bool workspace_needed = sample_needs_workspace(params, vocab);
  const int chunk = workspace_needed ? std::min(n, kSampleRows) : n;
  const size_t workspace_bytes = workspace_needed ? sample_workspace_bytes(chunk, vocab) : 0;
  reserve_scratch(bytes_of<SampleParams>(params.size()) + bytes_of<int32_t>(recent.size()) +
                      bytes_of<LogitBias>(bias.size()) + workspace_bytes + bytes_of<int32_t>(n) +
                      bytes_of<float>(n),
                  6);
  ArenaScope scope(scratch_);
  const SampleParams* staged_params = stage(std::span<const SampleParams>(params), "sampler");
  const int32_t* staged_recent = stage(std::span<const int32_t>(recent), "sampler history");
  const LogitBias* staged_bias = stage(std::span<const LogitBias>(bias), "logit bias");
  void* workspace =
      workspace_needed ? scratch_.take_bytes(workspace_bytes, "sampler rows") : nullptr;
  int32_t* device_tokens = scratch_.take<int32_t>(n, "sampled tokens");
  float* device_logprobs = scratch_.take<float>(n, "sampled log-probabilities");
  const float* all = f32(logits);
  // Chunks reuse the workspace in stream order.
  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int count = std::min(chunk, n - r0);
    sample_launch(all + static_cast<size_t>(r0) * vocab, count, vocab, staged_params + r0,
                  staged_recent ? staged_recent + static_cast<size_t>(r0) * recent_stride : nullptr,
                  recent_stride, staged_bias, workspace, device_tokens + r0, stream());
  }
  // The log-probability of each sampled token under the raw logits (bias and penalties are the
  // sampler's, not the model's).
  log_softmax(all, n, vocab, device_tokens, device_logprobs, stream());
  auto* host = static_cast<char*>(pinned(bytes_of<int32_t>(n) + bytes_of<float>(n)));
  PHOTON_CUDA_CHECK(
      cudaMemcpyAsync(host, device_tokens, bytes_of<int32_t>(n), cudaMemcpyDeviceToHost, stream()));
  PHOTON_CUDA_CHECK(cudaMemcpyAsync(host + bytes_of<int32_t>(n), device_logprobs,
                                    bytes_of<float>(n), cudaMemcpyDeviceToHost, stream()));
  synchronize();
  std::memcpy(tokens, host, bytes_of<int32_t>(n));
  std::memcpy(logprobs, host + bytes_of<int32_t>(n), bytes_of<float>(n));
}

void CudaBackend::do_logprobs(const Tensor& logits, std::span<const int32_t> targets, float* out) {
  if (targets.empty()) return;
  Lock lock(*this, "logprobs");
  const int n = as_int(static_cast<int64_t>(targets.size())), vocab = as_int(logits.cols);
  reserve_scratch(targets.size_bytes() + bytes_of<float>(n), 2);
  ArenaScope scope(scratch_);
  const int32_t* staged = stage(targets, "scored tokens");
  float* device_out = scratch_.take<float>(n, "log-probabilities");
  log_softmax(f32(logits), n, vocab, staged, device_out, stream());
  void* host = pinned(bytes_of<float>(n));
  PHOTON_CUDA_CHECK(
      cudaMemcpyAsync(host, device_out, bytes_of<float>(n), cudaMemcpyDeviceToHost, stream()));
  synchronize();
  std::memcpy(out, host, bytes_of<float>(n));
}

}  // namespace photon::cuda
