// The CUDA backend against the CPU backend, op by op through the backend interface, on fresh
// random inputs: what the engine calls is what is compared. f32 ops within 1e-5 (relative, as
// gpu_test.h measures it), GEMMs over bf16 weights within 1e-2, plain-f32 GEMMs (exact_f32)
// within 1e-5; sampled tokens equal. Also: row copies that must run in order, and device memory
// that stays flat over allocation cycles.
#include <numeric>

#include "backend/cuda/cuda_backend.h"
#include "gpu_test.h"

namespace photon::gpu_test {
namespace {

class GpuBackend : public GpuTest {
 public:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    cpu_ = make_cpu_backend();
    gpu_ = std::make_unique<cuda::CudaBackend>(cuda::CudaOptions{0, false});
    exact_ = std::make_unique<cuda::CudaBackend>(cuda::CudaOptions{0, true});
  }

  // The same values in a backend's memory.
  static Matrix on(Backend& b, const std::vector<float>& values, int64_t rows, int64_t cols) {
    Matrix m = new_matrix(b, rows, cols, "test input");
    b.upload(m, values.data());
    return m;
  }
  // A matrix whose every value is NaN, for outputs: an element no op writes stays NaN.
  static Matrix poisoned_on(Backend& b, int64_t rows, int64_t cols) {
    return on(b, std::vector<float>(size_t(rows) * cols, NAN), rows, cols);
  }
  static std::vector<float> host(Backend& b, const Tensor& t) {
    std::vector<float> values(size_t(t.rows) * t.cols);
    b.download(values.data(), t);
    return values;
  }

  std::unique_ptr<Backend> cpu_, gpu_, exact_;
};

TEST_F(GpuBackend, LinearMatchesCpuForEveryWeightType) {
  for (const auto& [n, in, out] :
       {std::tuple{1, 96, 80}, {3, 64, 200}, {17, 130, 66}, {64, 256, 96}}) {
    SCOPED_TRACE("n " + std::to_string(n) + ", in " + std::to_string(in) + ", out " +
                 std::to_string(out));
    const std::vector<float> x = random(size_t(n) * in), w = random(size_t(out) * in, -0.2f, 0.2f);
    const std::vector<float> bias = random(out), y0 = random(size_t(n) * out);
    for (DType file : {DType::F32, DType::BF16, DType::F16}) {
      std::vector<uint16_t> narrow;
      const void* data = w.data();
      if (file != DType::F32) {
        narrow = narrowed(file, w);
        data = narrow.data();
      }
      const HostWeight source{data, file, out, in}, bias_source{bias.data(), DType::F32, 1, out};
      for (bool accumulate : {false, true}) {
        auto run = [&](Backend& b) {
          const Tensor wt = b.weight(source, "w"), bt = b.weight(bias_source, "b");
          const Matrix xm = on(b, x, n, in), ym = on(b, y0, n, out);
          b.linear(xm, wt, &bt, ym, accumulate);
          return host(b, ym);
        };
        const std::vector<float> ref = run(*cpu_);
        // bf16: an f32 file is converted; the activations are rounded to the weights' type.
        EXPECT_LT(relative_error(run(*gpu_), ref), kBf16Bound) << dtype_name(file);
        // exact_f32 keeps f32 files in f32 and multiplies in plain f32.
        if (file == DType::F32) {
          EXPECT_LT(relative_error(run(*exact_), ref), kF32Bound);
        }
      }
    }
  }
}

TEST_F(GpuBackend, RowOpsMatchCpu) {
  const int n = 19, d = 200;
  const std::vector<float> x = random(size_t(n) * d, -3.0f, 3.0f), w = random(d);
  const std::vector<float> up = random(size_t(n) * d, -4.0f, 4.0f);
  for (Backend* b : {gpu_.get(), exact_.get()}) {
    auto rms = [&](Backend& on_b) {
      const Matrix xm = on(on_b, x, n, d), ym = poisoned_on(on_b, n, d);
      on_b.rmsnorm(xm, on_b.weight({w.data(), DType::F32, 1, d}, "norm"), ym, 1e-5f);
      return host(on_b, ym);
    };
    EXPECT_LT(relative_error(rms(*b), rms(*cpu_)), kF32Bound);
    auto gate = [&](Backend& on_b) {
      const Matrix g = on(on_b, x, n, d), u = on(on_b, up, n, d);
      on_b.swiglu(g, u);
      return host(on_b, g);
    };
    EXPECT_LT(relative_error(gate(*b), gate(*cpu_)), kF32Bound);
  }
}

TEST_F(GpuBackend, RopeMatchesCpu) {
  for (int head_dim : {8, 64, 128}) {
    const int n = 33, heads = 6;
    std::vector<int64_t> positions(n);
    for (int64_t& p : positions) p = uniform_int(0, 1 << 20);
    const std::vector<float> x = random(size_t(n) * heads * head_dim, -2.0f, 2.0f);
    auto run = [&](Backend& b) {
      const Matrix table = poisoned_on(b, 2 * n, head_dim / 2);
      b.rope_table(positions, head_dim, 10000.0f, table);
      const Matrix xm = on(b, x, n, heads * head_dim);
      b.rope(xm, heads, table);
      return host(b, xm);
    };
    EXPECT_LT(relative_error(run(*gpu_), run(*cpu_)), kF32Bound) << "head_dim " << head_dim;
  }
}

TEST_F(GpuBackend, EmbedGathersExactly) {
  const int vocab = 300, dim = 40;
  const std::vector<float> table = random(size_t(vocab) * dim, -2.0f, 2.0f);
  std::vector<int32_t> ids(57);
  for (int32_t& id : ids) id = uniform_int(0, vocab - 1);
  for (DType file : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<uint16_t> narrow;
    if (file != DType::F32) narrow = narrowed(file, table);
    const HostWeight source{
        file == DType::F32 ? static_cast<const void*>(table.data()) : narrow.data(), file, vocab,
        dim};
    auto run = [&](Backend& b) {
      const Matrix out = poisoned_on(b, static_cast<int64_t>(ids.size()), dim);
      b.embed(b.weight(source, "table"), ids, out);
      return host(b, out);
    };
    // An f32 table stays f32 only with exact_f32 (the default backend stores it as bf16).
    EXPECT_EQ(run(file == DType::F32 ? *exact_ : *gpu_), run(*cpu_)) << dtype_name(file);
  }
}

TEST_F(GpuBackend, RowCopiesRunInOrderWhenTheyMustAndTogetherOtherwise) {
  const int cols = 12;
  const std::vector<float> a = random(8 * cols), c = random(5 * cols);
  auto run = [&](Backend& b) {
    const Matrix ma = on(b, a, 8, cols), mc = on(b, c, 5, cols);
    // Scattered, disjoint: one launch on the GPU.
    b.copy_rows(std::vector<RowCopy>{{mc.slice(0, 2), ma.slice(5, 2)},
                                     {ma.slice(0, 1), mc.slice(4, 1)},
                                     {mc.slice(2, 1), ma.slice(7, 1)},
                                     {mc.slice(3, 0), ma.slice(0, 0)}});
    // A chain: row 1 <- row 0, then row 2 <- row 1 (the new row 1): in order, as on the CPU.
    b.copy_rows(std::vector<RowCopy>{{ma.row(1), ma.row(0)}, {ma.row(2), ma.row(1)}});
    std::vector<float> both = host(b, ma);
    const std::vector<float> second = host(b, mc);
    both.insert(both.end(), second.begin(), second.end());
    return both;
  };
  EXPECT_EQ(run(*gpu_), run(*cpu_));
}

struct SegmentSpec {
  int rows, start;
};

// kv_append then attention over segments of one stack layer, each with its own cache whose
// earlier positions hold random keys and values.
std::vector<float> attend(Backend& b, const AttentionShape& shape,
                          const std::vector<SegmentSpec>& specs, const std::vector<float>& q,
                          const std::vector<std::vector<float>>& cache_k,
                          const std::vector<std::vector<float>>& cache_v,
                          const std::vector<float>& k_new, const std::vector<float>& v_new) {
  const int kv_dim = shape.kv_heads * shape.head_dim, q_dim = shape.heads * shape.head_dim;
  int rows = 0;
  for (const SegmentSpec& s : specs) rows += s.rows;
  std::vector<Matrix> keys, values;
  std::vector<AttentionSegment> segments;
  int row = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int capacity = specs[i].start + specs[i].rows + 3;
    keys.push_back(new_matrix(b, capacity, kv_dim, "k"));
    values.push_back(new_matrix(b, capacity, kv_dim, "v"));
    if (specs[i].start > 0) {
      b.upload(keys.back().slice(0, specs[i].start), cache_k[i].data());
      b.upload(values.back().slice(0, specs[i].start), cache_v[i].data());
    }
    segments.push_back({row, specs[i].rows, specs[i].start, keys.back(), values.back()});
    row += specs[i].rows;
  }
  Matrix qm = new_matrix(b, rows, q_dim, "q"), km = new_matrix(b, rows, kv_dim, "k new"),
         vm = new_matrix(b, rows, kv_dim, "v new"), out = new_matrix(b, rows, q_dim, "out");
  b.upload(qm, q.data());
  b.upload(km, k_new.data());
  b.upload(vm, v_new.data());
  b.upload(out, std::vector<float>(size_t(rows) * q_dim, NAN).data());
  b.kv_append(km, vm, segments);
  b.attention(qm, shape, segments, out);
  return GpuBackend::host(b, out);
}

TEST_F(GpuBackend, AttentionMatchesCpuOnPrefillWindowsAndDecode) {
  // Head sizes for the tiled kernel (multiples of 4 up to 128) and beyond it (6, 160); GQA.
  for (const AttentionShape& shape :
       {AttentionShape{4, 2, 8}, AttentionShape{8, 2, 64}, AttentionShape{4, 4, 128},
        AttentionShape{4, 4, 6}, AttentionShape{2, 1, 160}}) {
    SCOPED_TRACE("heads " + std::to_string(shape.heads) + "/" + std::to_string(shape.kv_heads) +
                 ", head_dim " + std::to_string(shape.head_dim));
    // A fresh prompt, a continued one (tiled, partial last tile), local windows, long decodes
    // (split over blocks), in one call as the engine batches them.
    const std::vector<SegmentSpec> specs = {{100, 0}, {45, 37}, {3, 2},  {5, 0},
                                            {1, 700}, {1, 0},   {16, 16}};
    const int kv_dim = shape.kv_heads * shape.head_dim, q_dim = shape.heads * shape.head_dim;
    int rows = 0;
    std::vector<std::vector<float>> cache_k, cache_v;
    for (const SegmentSpec& s : specs) {
      rows += s.rows;
      cache_k.push_back(random(size_t(s.start) * kv_dim, -2.0f, 2.0f));
      cache_v.push_back(random(size_t(s.start) * kv_dim));
    }
    const std::vector<float> q = random(size_t(rows) * q_dim, -2.0f, 2.0f);
    const std::vector<float> k = random(size_t(rows) * kv_dim, -2.0f, 2.0f);
    const std::vector<float> v = random(size_t(rows) * kv_dim);
    const std::vector<float> ref = attend(*cpu_, shape, specs, q, cache_k, cache_v, k, v);
    EXPECT_LT(relative_error(attend(*gpu_, shape, specs, q, cache_k, cache_v, k, v), ref),
              kF32Bound);
  }
}

TEST_F(GpuBackend, SamplingGivesTheCpuTokensAndLogProbabilities) {
  // 300 rows: with ranked or penalised rows they go 128 at a time through the sampler's workspace;
  // greedy and plain-temperature rows alone go in one launch without it.
  const int vocab = 1000, n = 300;
  const std::vector<float> logits = random(size_t(n) * vocab, -6.0f, 6.0f);
  std::vector<int32_t> history(400);
  for (int32_t& t : history) t = uniform_int(0, vocab - 1);
  for (int kinds : {6, 2}) {
    SCOPED_TRACE(kinds == 6 ? "every kind of row" : "greedy and temperature rows");
    std::vector<SamplerConfig> configs(n);
    std::vector<SampleRequest> requests;
    for (int i = 0; i < n; ++i) {
      SamplerConfig& c = configs[i];
      c.seed = static_cast<uint64_t>(uniform_int(0, 1 << 30));
      switch (i % kinds) {
        case 0: break;  // greedy
        case 1: c.temperature = 0.8f; break;
        case 2: c.temperature = 1.2f, c.top_k = 40; break;
        case 3: c.temperature = 1.0f, c.top_p = 0.9f; break;
        case 4: c.temperature = 0.7f, c.min_p = 0.05f, c.top_k = 300; break;
        case 5: c.temperature = 1.0f, c.repetition_penalty = 1.3f, c.repetition_last_n = 64; break;
      }
      requests.push_back({&c, 1000 + i, std::span<const int32_t>(history).first(50 + i)});
    }
    auto run = [&](Backend& b, std::vector<float>* logprobs) {
      const Matrix lm = on(b, logits, n, vocab);
      std::vector<int32_t> tokens(n, -1);
      logprobs->assign(n, NAN);
      b.sample(lm, requests, tokens.data(), logprobs->data());
      return tokens;
    };
    std::vector<float> cpu_logprobs, gpu_logprobs;
    EXPECT_EQ(run(*gpu_, &gpu_logprobs), run(*cpu_, &cpu_logprobs));
    for (int i = 0; i < n; ++i) EXPECT_NEAR(gpu_logprobs[i], cpu_logprobs[i], 1e-5) << i;
  }

  std::vector<int32_t> targets(n);
  for (int32_t& t : targets) t = uniform_int(0, vocab - 1);
  auto score = [&](Backend& b) {
    const Matrix lm = on(b, logits, n, vocab);
    std::vector<float> out(n, NAN);
    b.logprobs(lm, targets, out.data());
    return out;
  };
  const std::vector<float> gpu = score(*gpu_), cpu = score(*cpu_);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-5) << i;
}

// Buffers go back to the backend's pool and are used again: a thousand cycles of the sizes a
// session allocates leave the device's free memory where the first cycle left it.
TEST_F(GpuBackend, DeviceMemoryStaysFlatOverAllocationCycles) {
  auto cycle = [&] {
    std::vector<Matrix> held;
    for (int64_t rows : {1, 7, 4096, 130, 1 << 16})
      held.push_back(new_matrix(*gpu_, rows, 64, "x"));
  };
  cycle();
  size_t free_before = 0, free_after = 0, total = 0;
  PHOTON_CUDA_CHECK(cudaDeviceSynchronize());
  PHOTON_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  for (int i = 0; i < 1000; ++i) cycle();
  PHOTON_CUDA_CHECK(cudaDeviceSynchronize());
  PHOTON_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  EXPECT_GE(free_after + (size_t{2} << 20), free_before);
}

}  // namespace
}  // namespace photon::gpu_test
