// The CPU backend's attention against a double-precision computation of the spec's formula
// (causal grouped-query softmax attention over a cache), for several segments and GQA groups; and
// its promises that neither the thread count nor the rows beside a row change its result, and that
// a 16-bit cache computes what an f32 cache holding the same values does.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_features.h"

namespace photon::cpu {
namespace {

struct Case {
  int heads, kv_heads, head_dim;
  std::vector<AttentionSegment> segments;  // k, v filled in by Inputs
};

// Host memory as a CPU tensor [size / cols, cols] of `dtype`, through a buffer that only names
// that memory (kept in `buffers`).
template <class T>
Tensor view(std::vector<T>& values, int cols, DType dtype,
            std::vector<std::unique_ptr<Buffer>>& buffers) {
  const size_t bytes = values.size() * sizeof(T);
  buffers.push_back(std::make_unique<Buffer>(nullptr, values.data(), bytes));
  const int64_t rows = static_cast<int64_t>(bytes / dtype_size(dtype)) / cols;
  return {buffers.back().get(), 0, rows, cols, dtype};
}

// Random queries and one cache per segment, [start + rows, kv_heads * head_dim] each.
struct Inputs {
  std::vector<float> q;
  std::vector<std::vector<float>> k, v;
  std::vector<std::unique_ptr<Buffer>> buffers;
  int rows = 0;

  Inputs(Case& c, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int kv_dim = c.kv_heads * c.head_dim;
    for (AttentionSegment& s : c.segments) {
      s.row0 = rows;
      rows += s.rows;
      k.emplace_back(static_cast<size_t>(s.start + s.rows) * kv_dim);
      v.emplace_back(k.back().size());
      for (float& x : k.back()) x = normal(rng);
      for (float& x : v.back()) x = normal(rng);
    }
    for (size_t i = 0; i < c.segments.size(); ++i) {
      c.segments[i].k = view(k[i], kv_dim, DType::F32, buffers);
      c.segments[i].v = view(v[i], kv_dim, DType::F32, buffers);
    }
    q.resize(static_cast<size_t>(rows) * c.heads * c.head_dim);
    for (float& x : q) x = normal(rng);
  }
};

std::vector<double> reference(const Case& c, const Inputs& in) {
  const int d = c.head_dim, group = c.heads / c.kv_heads, kv_dim = c.kv_heads * d;
  std::vector<double> out(in.q.size());
  for (size_t index = 0; index < c.segments.size(); ++index) {
    const AttentionSegment& s = c.segments[index];
    const float* keys_of = in.k[index].data();
    const float* values_of = in.v[index].data();
    for (int i = 0; i < s.rows; ++i) {
      const long row = s.row0 + i;
      const int keys = s.start + i + 1;
      for (int h = 0; h < c.heads; ++h) {
        const float* q = in.q.data() + (row * c.heads + h) * d;
        std::vector<double> w(keys);
        double max = -INFINITY, sum = 0;
        for (int j = 0; j < keys; ++j) {
          const float* k = keys_of + static_cast<long>(j) * kv_dim + (h / group) * d;
          double dot = 0;
          for (int e = 0; e < d; ++e) dot += static_cast<double>(q[e]) * k[e];
          w[j] = dot / std::sqrt(static_cast<double>(d));
          max = std::max(max, w[j]);
        }
        for (double& x : w) sum += (x = std::exp(x - max));
        for (int e = 0; e < d; ++e) {
          double acc = 0;
          for (int j = 0; j < keys; ++j)
            acc += w[j] / sum * values_of[static_cast<long>(j) * kv_dim + (h / group) * d + e];
          out[(row * c.heads + h) * d + e] = acc;
        }
      }
    }
  }
  return out;
}

// The kernel set a model gets on this processor.
const SkinnyKernels& widest() {
  return kernel_functions(default_cpu_kernels());
}

std::vector<float> run(const Case& c, const Inputs& in, int threads) {
  std::vector<float> out(in.q.size(), NAN);
  attention(in.q.data(), {c.heads, c.kv_heads, c.head_dim}, c.segments, out.data(), widest(),
            threads);
  return out;
}

TEST(CpuAttention, MatchesDoublePrecisionOverSegmentsAndGroups) {
  std::vector<Case> cases = {
      {4, 4, 8, {{0, 5, 0}}},                          // a prompt from the start
      {8, 2, 16, {{0, 3, 40}, {0, 1, 7}, {0, 6, 0}}},  // caches continued, GQA 4
      {6, 3, 12, {{0, 1, 300}}},                       // one decoding row, GQA 2
      // rows of more than 512 keys, split into blocks: decoding rows and a prompt crossing 512
      {8, 2, 16, {{0, 2, 1500}, {0, 700, 0}}},
  };
  unsigned seed = 1;
  for (Case& c : cases) {
    const Inputs in(c, seed++);
    const std::vector<double> want = reference(c, in);
    const std::vector<float> got = run(c, in, 2);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "element " << i;
  }
}

// Enough work to be spread over the threads: every thread count gives the same bits.
TEST(CpuAttention, ThreadsChangeNothing) {
  std::vector<Case> cases = {
      {8, 2, 64, {{0, 3, 5000}, {0, 1, 3000}}},
      {4, 4, 32, {{0, 64, 2000}}},
  };
  unsigned seed = 10;
  for (Case& c : cases) {
    const Inputs in(c, seed++);
    const std::vector<float> one = run(c, in, 1);
    for (int threads : {2, 3, 4, 8}) {
      const std::vector<float> many = run(c, in, threads);
      for (size_t i = 0; i < one.size(); ++i)
        ASSERT_EQ(one[i], many[i]) << "element " << i << " with " << threads << " threads";
    }
    const std::vector<double> want = reference(c, in);
    for (size_t i = 0; i < want.size(); i += 7)
      ASSERT_NEAR(one[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "element " << i;
  }
}

// A row's result depends on its own keys only: a long prompt attended in one call (its rows' key
// blocks held in several waves of partial results) gives the bits of the same rows attended in
// calls of 500 rows, and of one decoding row alone.
TEST(CpuAttention, RowsDoNotDependOnTheRowsBesideThem) {
  Case whole{64, 64, 8, {{0, 3000, 0}}};
  const Inputs in(whole, 20);
  const std::vector<float> all = run(whole, in, 2);
  const long width = 64 * 8;
  for (int first = 0; first < 3000; first += 500) {
    const AttentionSegment part{0, 500, first, whole.segments[0].k, whole.segments[0].v};
    std::vector<float> got(static_cast<size_t>(500) * width, NAN);
    attention(in.q.data() + first * width, {64, 64, 8}, {&part, 1}, got.data(), widest(), 2);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], all[first * width + i]) << "row " << first + i / width;
  }
  const AttentionSegment last{0, 1, 2999, whole.segments[0].k, whole.segments[0].v};
  std::vector<float> alone(width, NAN);
  attention(in.q.data() + 2999 * width, {64, 64, 8}, {&last, 1}, alone.data(), widest(), 1);
  for (long i = 0; i < width; ++i) ASSERT_EQ(alone[i], all[2999 * width + i]) << "element " << i;
}

// A 16-bit cache (bf16, f16) gives what an f32 cache holding its values gives: its keys and
// values are widened exactly and go through the same arithmetic (up to the vector lanes' order,
// which may follow the rows' alignment), in short rows and in the key blocks of long ones, mixed
// with f32 segments in one call. The rounding itself would move results by about 1e-3.
TEST(CpuAttention, SixteenBitCachesComputeWhatF32CachesOfTheirValuesDo) {
  for (const DType type : {DType::BF16, DType::F16}) {
    Case c{8, 2, 16, {{0, 3, 40}, {0, 1, 1300}, {0, 600, 0}, {0, 2, 9}}};
    Inputs in(c, 30);
    std::vector<std::vector<uint16_t>> k16(c.segments.size()), v16(c.segments.size());
    for (size_t i = 0; i < c.segments.size(); ++i) {
      for (auto [values, bits] : {std::pair{&in.k[i], &k16[i]}, std::pair{&in.v[i], &v16[i]}}) {
        bits->resize(values->size());
        convert_from_f32(type, values->data(), bits->data(), values->size());
        convert_to_f32(type, bits->data(), values->data(), values->size());  // the f32 twin
      }
    }
    const std::vector<float> want = run(c, in, 2);
    Case sixteen = c;
    for (size_t i = 0; i < c.segments.size(); i += 2) {  // every other segment: mixed types
      sixteen.segments[i].k = view(k16[i], 32, type, in.buffers);
      sixteen.segments[i].v = view(v16[i], 32, type, in.buffers);
    }
    const std::vector<float> got = run(sixteen, in, 2);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6 * (1 + std::abs(want[i])))
          << dtype_name(type) << " element " << i;
  }
}

}  // namespace
}  // namespace photon::cpu
