// Attention on the device against cpu::attention: prefill over a stream, local windows, decode with
// and without key splits, GQA, f32 and bf16 caches; the KV append and CPU <-> GPU cache transfer.
#include "backend/cpu/attention.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/kv_cache.h"
#include "gpu_test.h"

namespace photon::gpu_test {
namespace {

using GpuAttention = GpuTest;

struct Segment {
  int rows, start;
};

class AttentionCase {
 public:
  AttentionCase(GpuTest& test, const cuda::AttentionShape& shape, const std::vector<Segment>& spec)
      : shape_(shape) {
    const int q_dim = shape.heads * shape.head_dim, kv_dim = shape.kv_heads * shape.head_dim;
    int row = 0;
    for (const Segment& s : spec) {
      const size_t values = size_t(s.start + s.rows) * kv_dim;
      std::vector<float> k = test.random(values, -2.0f, 2.0f), v = test.random(values);
      if (shape.kv_dtype == DType::BF16) {
        k = rounded_through(DType::BF16, k);
        v = rounded_through(DType::BF16, v);
        device_.push_back({row, s.rows, s.start, test.upload(narrowed(DType::BF16, k)),
                           test.upload(narrowed(DType::BF16, v))});
      } else {
        device_.push_back({row, s.rows, s.start, test.upload(k), test.upload(v)});
      }
      keys_.push_back(std::move(k));
      values_.push_back(std::move(v));
      row += s.rows;
    }
    rows_ = row;
    for (size_t i = 0; i < spec.size(); ++i)
      host_.push_back(
          {device_[i].row0, spec[i].rows, spec[i].start, keys_[i].data(), values_[i].data()});
    q_ = test.random(size_t(rows_) * q_dim, -2.0f, 2.0f);
  }

  std::vector<float> cpu() const {
    std::vector<float> out(q_.size());
    cpu::attention(q_.data(), shape_.heads, shape_.kv_heads, shape_.head_dim, host_, out.data());
    return out;
  }
  std::vector<float> gpu(GpuTest& test, cudaStream_t stream, cuda::Arena& scratch, int splits) {
    float* out = test.poisoned<float>(q_.size());
    cuda::attention(test.upload(q_), shape_, device_, out, scratch, stream, splits);
    return test.download(out, q_.size());
  }
  int rows() const { return rows_; }

 private:
  cuda::AttentionShape shape_;
  std::vector<std::vector<float>> keys_, values_;
  std::vector<cuda::AttentionSegment> device_;
  std::vector<cpu::AttentionSegment> host_;
  std::vector<float> q_;
  int rows_ = 0;
};

TEST_F(GpuAttention, PrefillOverAStreamMatchesCpu) {
  // photon-600m heads (32 x 52), GQA 8 -> 2 at head_dim 64, and the widest head supported.
  const cuda::AttentionShape shapes[] = {{32, 32, 52, DType::F32},
                                         {8, 2, 64, DType::F32},
                                         {8, 2, 64, DType::BF16},
                                         {4, 1, 256, DType::F32}};
  for (const cuda::AttentionShape& shape : shapes) {
    SCOPED_TRACE("heads " + std::to_string(shape.heads) + "/" + std::to_string(shape.kv_heads) +
                 " x " + std::to_string(shape.head_dim) + " " + dtype_name(shape.kv_dtype));
    // A fresh stream of 300 rows, and a continuation of 77 rows after 150 cached positions.
    AttentionCase fresh(*this, shape, {{300, 0}});
    EXPECT_LT(relative_error(fresh.gpu(*this, stream(), scratch(), 1), fresh.cpu()), kF32Bound);
    AttentionCase continued(*this, shape, {{77, 150}});
    EXPECT_LT(relative_error(continued.gpu(*this, stream(), scratch(), 0), continued.cpu()),
              kF32Bound);
  }
}

TEST_F(GpuAttention, LocalWindowsInOneLaunchMatchCpu) {
  // R = 2, C = 4: windows of at most 5 positions, fed partly (prefill) or one row at a time.
  std::vector<Segment> spec;
  for (int w = 0; w < 150; ++w) {
    const int start = uniform_int(0, 4);
    spec.push_back({uniform_int(1, 5 - start), start});
  }
  for (DType kv : {DType::F32, DType::BF16}) {
    AttentionCase windows(*this, {32, 32, 52, kv}, spec);
    EXPECT_LT(relative_error(windows.gpu(*this, stream(), scratch(), 0), windows.cpu()), kF32Bound)
        << dtype_name(kv);
  }
}

TEST_F(GpuAttention, DecodeWithAndWithoutKeySplitsMatchesCpu) {
  // One query per session against caches of up to 2000 positions (the top level of a long
  // context, or a vanilla model's cache).
  for (int sessions : {1, 3, 64}) {
    std::vector<Segment> spec;
    for (int s = 0; s < sessions; ++s) spec.push_back({1, uniform_int(0, 2000)});
    spec[0].start = 1999;
    for (DType kv : {DType::F32, DType::BF16}) {
      AttentionCase decode(*this, {16, 4, 52, kv}, spec);
      const std::vector<float> ref = decode.cpu();
      for (int splits : {1, 7, 64, 0}) {  // 0: chosen for the device
        SCOPED_TRACE(std::to_string(sessions) + " sessions, splits " + std::to_string(splits) +
                     ", " + dtype_name(kv));
        EXPECT_LT(relative_error(decode.gpu(*this, stream(), scratch(), splits), ref), kF32Bound);
      }
    }
  }
  EXPECT_EQ(cuda::attention_splits(1, 32, 4, 132), 1);        // a window: never split
  EXPECT_GT(cuda::attention_splits(1, 32, 2000, 132), 1);     // one long row: split
  EXPECT_EQ(cuda::attention_splits(4096, 32, 2000, 132), 1);  // a full grid already
}

TEST_F(GpuAttention, UnsupportedShapesAreRefused) {
  float* out = poisoned<float>(3 * 4 * 64);
  const cuda::AttentionSegment seg{0, 3, 0, poisoned<float>(3 * 128), poisoned<float>(3 * 128)};
  for (const cuda::AttentionShape& bad :
       {cuda::AttentionShape{4, 3, 64, DType::F32}, cuda::AttentionShape{4, 2, 63, DType::F32},
        cuda::AttentionShape{4, 2, 512, DType::F32}, cuda::AttentionShape{4, 2, 64, DType::F16}}) {
    try {
      cuda::attention(out, bad, std::span(&seg, 1), out, scratch(), stream());
      ADD_FAILURE() << "accepted heads " << bad.heads << "/" << bad.kv_heads << " x "
                    << bad.head_dim;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), PHOTON_ERR_UNSUPPORTED);
    }
  }
}

TEST_F(GpuAttention, AppendedKeysAndValuesLandInTheirCachesAndAttend) {
  const int layers = 2, capacity = 40, heads = 8, kv_heads = 2, head_dim = 64;
  const int kv_dim = kv_heads * head_dim, layer = 1;
  const std::vector<Segment> spec = {{5, 0}, {1, 30}, {3, 10}};
  for (DType kv : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(kv));
    std::vector<cuda::DeviceKvCache> caches;
    std::vector<std::vector<float>> host_k, host_v;  // each cache's layer in f32
    std::vector<cuda::AttentionSegment> segments;
    int row = 0;
    for (const Segment& s : spec) {
      caches.emplace_back(layers, capacity, kv_dim, kv);
      cuda::DeviceKvCache& cache = caches.back();
      // Earlier positions from the host (as a session moved from the CPU); the rest poisoned.
      std::vector<float> k = random(size_t(capacity) * kv_dim * layers);
      std::vector<float> v = random(k.size());
      PHOTON_CUDA_CHECK(
          cudaMemsetAsync(cache.k_at(0, 0), 0xFF, cache.bytes_reserved() / 2, stream()));
      PHOTON_CUDA_CHECK(
          cudaMemsetAsync(cache.v_at(0, 0), 0xFF, cache.bytes_reserved() / 2, stream()));
      cache.upload(k.data(), v.data(), capacity, s.start, scratch(), stream());
      if (kv == DType::BF16) k = rounded_through(kv, k), v = rounded_through(kv, v);
      host_k.emplace_back(k.begin() + size_t(layer) * capacity * kv_dim,
                          k.begin() + size_t(layer + 1) * capacity * kv_dim);
      host_v.emplace_back(v.begin() + size_t(layer) * capacity * kv_dim,
                          v.begin() + size_t(layer + 1) * capacity * kv_dim);
      segments.push_back({row, s.rows, s.start, cache.k_at(layer, 0), cache.v_at(layer, 0)});
      row += s.rows;
    }
    std::vector<float> new_k = random(size_t(row) * kv_dim), new_v = random(size_t(row) * kv_dim);
    const cuda::AttentionSegment* staged =
        cuda::stage(scratch(), std::span<const cuda::AttentionSegment>(segments), "test", stream());
    cuda::kv_append_launch(upload(new_k), upload(new_v), kv_dim, kv, staged,
                           static_cast<int>(segments.size()), row, stream());
    if (kv == DType::BF16) new_k = rounded_through(kv, new_k), new_v = rounded_through(kv, new_v);

    std::vector<cpu::AttentionSegment> host_segments;
    for (size_t i = 0; i < spec.size(); ++i) {
      const Segment& s = spec[i];
      const size_t first = size_t(s.start) * kv_dim, count = size_t(s.rows) * kv_dim;
      std::copy_n(new_k.begin() + size_t(segments[i].row0) * kv_dim, count,
                  host_k[i].begin() + first);
      std::copy_n(new_v.begin() + size_t(segments[i].row0) * kv_dim, count,
                  host_v[i].begin() + first);
      // The whole cache back through download: every filled position as expected.
      const int filled = s.start + s.rows;
      std::vector<float> k_back(size_t(layers) * filled * kv_dim), v_back(k_back.size());
      caches[i].download(k_back.data(), v_back.data(), filled, filled, scratch(), stream());
      const std::vector<float> want_k(host_k[i].begin(),
                                      host_k[i].begin() + size_t(filled) * kv_dim);
      const std::vector<float> got_k(k_back.begin() + size_t(layer) * filled * kv_dim,
                                     k_back.end());
      const std::vector<float> got_v(v_back.begin() + size_t(layer) * filled * kv_dim,
                                     v_back.end());
      EXPECT_EQ(got_k, want_k) << "segment " << i;
      EXPECT_EQ(got_v,
                std::vector<float>(host_v[i].begin(), host_v[i].begin() + size_t(filled) * kv_dim));
      host_segments.push_back(
          {segments[i].row0, s.rows, s.start, host_k[i].data(), host_v[i].data()});
    }
    const std::vector<float> q = random(size_t(row) * heads * head_dim);
    std::vector<float> ref(q.size());
    cpu::attention(q.data(), heads, kv_heads, head_dim, host_segments, ref.data());
    float* out = poisoned<float>(q.size());
    cuda::attention(upload(q), {heads, kv_heads, head_dim, kv}, segments, out, scratch(), stream());
    EXPECT_LT(relative_error(download(out, q.size()), ref), kF32Bound);
  }
}

}  // namespace
}  // namespace photon::gpu_test
