// Op-level microbenchmark of the CUDA backend (scripts/gpu-check runs it): the device's measured
// copy bandwidth, then RMSNorm, decode attention and bf16 linear layers as achieved bandwidth
// against it. Shapes are photon-600m's (width 1664, 32 heads x 52, FFN 4096, vocab 32000).
// Timing: CUDA events around `kInner` launches, median of kSamples after a warm-up; inputs are
// random and rotated among copies larger than L2 where the op would otherwise run from cache.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/buffer.h"
#include "backend/cuda/linear.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/sample.h"
#include "core/error.h"

namespace photon::cuda {
namespace {

constexpr int kSamples = 15;
constexpr int kInner = 10;

template <class T>
T* as(const DeviceBuffer& buffer) {
  return static_cast<T*>(buffer.data());
}

// Host values copied into a fresh piece of the arena (descriptors, settings).
template <class T>
T* stage(Arena& arena, const std::vector<T>& values) {
  T* device = arena.take<T>(values.size(), "benchmark descriptors");
  PHOTON_CUDA_CHECK(
      cudaMemcpy(device, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

struct Bench {
  Device& device;
  Arena& scratch;
  cudaEvent_t start = nullptr, stop = nullptr;
  double copy_gbps = 0.0;
  uint64_t lcg = 0x9e3779b97f4a7c15ull;

  float next_uniform() {  // in [-1, 1)
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(lcg >> 11) - (int64_t{1} << 52)) /
           static_cast<float>(int64_t{1} << 52);
  }
  // Device memory filled with random values in [-scale, scale): f32 or bf16.
  DeviceBuffer random(size_t count, bool bf16, float scale = 1.0f) {
    DeviceBuffer buffer(count * (bf16 ? 2 : 4), "benchmark input");
    const size_t chunk = size_t{1} << 22;
    std::vector<float> host(std::min(count, chunk));
    std::vector<uint16_t> narrow(bf16 ? host.size() : 0);
    for (size_t done = 0; done < count; done += chunk) {
      const size_t n = std::min(chunk, count - done);
      for (size_t i = 0; i < n; ++i) host[i] = next_uniform() * scale;
      if (bf16) {
        for (size_t i = 0; i < n; ++i) narrow[i] = f32_to_bf16(host[i]);
        PHOTON_CUDA_CHECK(
            cudaMemcpy(as<uint16_t>(buffer) + done, narrow.data(), n * 2, cudaMemcpyHostToDevice));
      } else {
        PHOTON_CUDA_CHECK(
            cudaMemcpy(as<float>(buffer) + done, host.data(), n * 4, cudaMemcpyHostToDevice));
      }
    }
    device.synchronize();
    return buffer;
  }

  // Median seconds of one call of `op(i)`, i counting launches (for rotating inputs).
  double time(const std::function<void(int)>& op) {
    int launch = 0;
    for (int i = 0; i < 3; ++i) op(launch++);
    device.synchronize();
    std::vector<double> samples;
    for (int s = 0; s < kSamples; ++s) {
      PHOTON_CUDA_CHECK(cudaEventRecord(start, device.stream()));
      for (int i = 0; i < kInner; ++i) op(launch++);
      PHOTON_CUDA_CHECK(cudaEventRecord(stop, device.stream()));
      PHOTON_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      PHOTON_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      samples.push_back(ms * 1e-3 / kInner);
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
  }

  // The attention kernels alone: descriptors staged and splits chosen once, as a decode step
  // recorded in a CUDA graph would have them.
  double time_attention(const float* q, const AttentionShape& shape, DType kv_dtype,
                        const std::vector<DeviceSegment>& segments, float* out) {
    ArenaScope scope(scratch);
    const int n_rows = segments.back().row0 + segments.back().rows;
    int max_keys = 0;
    for (const DeviceSegment& seg : segments) max_keys = std::max(max_keys, seg.start + seg.rows);
    const int splits =
        attention_splits(n_rows, shape.heads, max_keys, device.info().multiprocessors);
    const DeviceSegment* staged = stage(scratch, segments);
    float* partials = static_cast<float*>(scratch.take_bytes(
        attention_partials_bytes(n_rows, shape.heads, shape.head_dim, splits), "partials"));
    return time([&](int) {
      attention_launch(q, shape, kv_dtype, staged, static_cast<int>(segments.size()), n_rows,
                       splits, partials, out, device.stream());
    });
  }

  void row(const std::string& op, const std::string& shape, double seconds, double bytes,
           double flops) {
    const double gbps = bytes / seconds * 1e-9;
    std::printf("| %s | %s | %.1f | %.0f | %.0f%% |", op.c_str(), shape.c_str(), seconds * 1e6,
                gbps, copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 100.0);
    if (flops > 0)
      std::printf(" %.1f |\n", flops / seconds * 1e-12);
    else
      std::printf(" |\n");
  }
};

void run() {
  Device device(0);
  const DeviceInfo& info = device.info();
  Arena scratch(size_t{2} << 30, "benchmark scratch");
  Bench b{device, scratch};
  PHOTON_CUDA_CHECK(cudaEventCreate(&b.start));
  PHOTON_CUDA_CHECK(cudaEventCreate(&b.stop));
  const cudaStream_t s = device.stream();
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("device: %s (compute %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB), %s\n\n",
              info.name.c_str(), info.major, info.minor, info.multiprocessors,
              static_cast<double>(info.memory_bytes) / (1 << 30),
              static_cast<double>(info.l2_bytes) / (1 << 20), date);
  std::printf("| op | shape | median us | GB/s | of copy | TFLOP/s |\n|---|---|---|---|---|---|\n");

  {  // The ceiling: a device-to-device copy, bytes read plus written.
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer from = b.random(bytes / 4, false), to(bytes, "copy target");
    const double t = b.time([&](int) {
      PHOTON_CUDA_CHECK(
          cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice, s));
    });
    b.copy_gbps = 2.0 * bytes / t * 1e-9;
    b.row("copy (device to device)", "1 GiB", t, 2.0 * bytes, 0);
  }
  {  // RMSNorm over a prefill-sized block: read x and w, write y.
    const int n = 16384, d = 1664;
    DeviceBuffer x = b.random(size_t(n) * d, false), w = b.random(d, false);
    DeviceBuffer y(size_t(n) * d * 4, "rmsnorm out");
    const double t =
        b.time([&](int) { rmsnorm(as<float>(x), as<float>(w), as<float>(y), n, d, 1e-5f, s); });
    b.row("rmsnorm", "16384 x 1664", t, 2.0 * n * d * 4, 0);
  }
  // Decode attention: one query per session against `keys` cached positions of one layer.
  for (const auto& [sessions, keys, bf16] :
       {std::tuple{1, 2048, false}, {64, 2048, false}, {64, 2048, true}, {256, 128, true}}) {
    const int heads = 32, head_dim = 52, kv_dim = heads * head_dim;
    const size_t per_session = size_t(keys) * kv_dim;
    DeviceBuffer k = b.random(per_session * sessions, bf16),
                 v = b.random(per_session * sessions, bf16);
    DeviceBuffer q = b.random(size_t(sessions) * kv_dim, false);
    DeviceBuffer out(size_t(sessions) * kv_dim * 4, "attention out");
    std::vector<DeviceSegment> segments;
    const size_t element = bf16 ? 2 : 4;
    for (int i = 0; i < sessions; ++i)
      segments.push_back({i, 1, keys - 1, static_cast<char*>(k.data()) + i * per_session * element,
                          static_cast<char*>(v.data()) + i * per_session * element});
    const double t = b.time_attention(as<float>(q), {heads, heads, head_dim},
                                      bf16 ? DType::BF16 : DType::F32, segments, as<float>(out));
    b.row(std::string("attention decode ") + (bf16 ? "bf16" : "f32") + " KV",
          std::to_string(sessions) + " x " + std::to_string(keys) + " keys, 32 x 52", t,
          2.0 * per_session * sessions * element, 4.0 * sessions * keys * kv_dim);
  }
  {  // RecGen level-1 windows: R + C - 1 = 5 positions each, 1024 windows in one launch.
    const int windows = 1024, rows = 5, kv_dim = 1664;
    DeviceBuffer k = b.random(size_t(windows) * rows * kv_dim, false);
    DeviceBuffer v = b.random(size_t(windows) * rows * kv_dim, false);
    DeviceBuffer q = b.random(size_t(windows) * rows * kv_dim, false);
    DeviceBuffer out(size_t(windows) * rows * kv_dim * 4, "window out");
    std::vector<DeviceSegment> segments;
    for (int i = 0; i < windows; ++i)
      segments.push_back({i * rows, rows, 0, as<float>(k) + size_t(i) * rows * kv_dim,
                          as<float>(v) + size_t(i) * rows * kv_dim});
    const double t =
        b.time_attention(as<float>(q), {32, 32, 52}, DType::F32, segments, as<float>(out));
    b.row("attention windows f32 KV", "1024 x 5 rows", t, 4.0 * windows * rows * kv_dim * 4, 0);
  }
  // bf16 linear layers at both precisions: the FFN up projection and the LM head, weights rotated
  // past L2.
  for (const Precision precision : {Precision::Exact, Precision::Bf16}) {
    Gemm gemm(size_t{32} << 20, precision);
    for (const auto& [in, out, name] :
         {std::tuple{1664, 4096, "ffn up 4096 x 1664"}, {1664, 32000, "lm head 32000 x 1664"}}) {
      const size_t weight = size_t(in) * out;
      const int copies =
          static_cast<int>(std::max<size_t>(1, 3 * info.l2_bytes / (weight * 2) + 1));
      std::vector<DeviceBuffer> weights;
      for (int c = 0; c < copies; ++c) weights.push_back(b.random(weight, true, 0.05f));
      for (int n : {1, 16, 64, 256, 2048}) {
        DeviceBuffer x = b.random(size_t(n) * in, false);
        DeviceBuffer y(size_t(n) * out * 4, "linear out");
        const double t = b.time([&](int i) {
          const WeightMatrix w{weights[i % copies].data(), DType::BF16, out, in};
          gemm.linear(as<float>(x), n, w, nullptr, as<float>(y), false, scratch, s);
        });
        b.row(std::string("linear bf16 weights, ") + precision_name(precision),
              std::string(name) + ", " + std::to_string(n) + " rows", t,
              2.0 * weight + 4.0 * n * (in + out), 2.0 * n * weight);
      }
    }
  }
  // Sampling 64 and 256 rows (a decode step's sessions) of 32000 logits.
  for (const int rows : {64, 256}) {
    const int vocab = 32000;
    DeviceBuffer logits = b.random(size_t(rows) * vocab, false, 8.0f);
    int32_t* tokens = scratch.take<int32_t>(rows, "tokens");
    for (const auto& [name, config] :
         {std::pair{"greedy", SampleParams{.temperature = 0.0f, .seed = 1}},
          {"temperature 1", SampleParams{.temperature = 1.0f, .seed = 1}},
          {"top-k 40", SampleParams{.temperature = 0.8f, .top_k = 40, .seed = 1}},
          {"top-p 0.9", SampleParams{.temperature = 0.8f, .top_p = 0.9f, .seed = 1}}}) {
      const std::vector<SampleParams> params(rows, config);
      ArenaScope scope(scratch);
      const SampleParams* staged = stage(scratch, params);
      void* workspace = sample_needs_workspace(params, vocab)
                            ? scratch.take_bytes(sample_workspace_bytes(rows, vocab), "sampler")
                            : nullptr;
      const double t = b.time([&](int) {
        sample_launch(as<float>(logits), rows, vocab, staged, nullptr, 0, nullptr, workspace,
                      tokens, s);
      });
      b.row(std::string("sample ") + name, std::to_string(rows) + " x 32000", t, 4.0 * rows * vocab,
            0);
    }
  }
  cudaEventDestroy(b.start);
  cudaEventDestroy(b.stop);
}

}  // namespace
}  // namespace photon::cuda

int main() {
  try {
    photon::cuda::run();
  } catch (const photon::Error& e) {
    std::fprintf(stderr, "photon_gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
