// The skinny kernels in plain C++: the fallback of CPUs without the vector kernels' instruction
// sets. Sixteen-lane arrays, which compilers turn into whatever vectors the target has.
#include <cmath>
#include <cstring>

#include "backend/cpu/attention_rows_loops.h"
#include "backend/cpu/skinny_gemm_tiles.h"
#include "backend/cpu/skinny_int8_tiles.h"
#include "core/dtype.h"

namespace photon::cpu {

namespace {

struct Portable {
  static constexpr int kLanes = 16;
  static constexpr int kRows = 3, kOutputs = 2;
  static constexpr int kBlockedRows = 48;  // as the AVX2 kernels
  struct Vec {
    float v[16];
  };

  static Vec zero() { return Vec{}; }
  static Vec load(const float* p) {
    Vec r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static Vec load(const Bf16* p) {
    Vec r;
    for (int l = 0; l < 16; ++l) r.v[l] = scalar(p + l);
    return r;
  }
  static Vec load(const F16* p) {
    Vec r;
    for (int l = 0; l < 16; ++l) r.v[l] = scalar(p + l);
    return r;
  }
  static Vec scale(const Q8Block* b) {
    Vec r;
    for (float& v : r.v) v = bf16_to_f32(b->scale);
    return r;
  }
  static Vec load(const int8_t* q, const Vec& d) {
    Vec r;
    for (int l = 0; l < 16; ++l) r.v[l] = d.v[l] * static_cast<float>(q[l]);
    return r;
  }
  static Vec fma(const Vec& a, const Vec& b, Vec c) {
    for (int l = 0; l < 16; ++l) c.v[l] = a.v[l] * b.v[l] + c.v[l];
    return c;
  }
  static float sum(const Vec* parts) {
    float s[16];
    std::memcpy(s, parts[0].v, sizeof s);
    for (int half = 8; half >= 1; half /= 2)
      for (int l = 0; l < half; ++l) s[l] = s[l] + s[l + half];
    return s[0];
  }
  static float scalar(const float* p) { return *p; }
  static float scalar(const Bf16* p) { return bf16_to_f32(p->bits); }
  static float scalar(const F16* p) { return f16_to_f32(p->bits); }
  static float scalar(const Q8Block* b, int i) {
    return bf16_to_f32(b->scale) * static_cast<float>(b->q[i]);
  }
  static float fma1(float a, float b, float c) { return a * b + c; }
};

// The q8_int8 kernel (skinny_int8_tiles.h), fused as the vector kernels are, so that all give the
// same bits.
struct PortableInt8 {
  static constexpr int kRows = 3, kOutputs = 2, kPack = 1;
  using Single = PortableInt8;
  struct Acc {
    float v[8];
  };
  struct Block {
    const int8_t* q;
    float d;
  };
  using Weight = Block;
  using Act = Block;
  static Acc zero() { return Acc{}; }
  static Weight weight(const Q8Block* b, long) { return {b->q, bf16_to_f32(b->scale)}; }
  static Act act(const int8_t* q, const float* d) { return {q, *d}; }
  static void step(Acc& acc, const Act& x, const Weight& w) {
    const float d = x.d * w.d;
    for (int m = 0; m < 8; ++m) {
      int t = 0;
      for (int u = 4 * m; u < 4 * m + 4; ++u) t += x.q[u] * w.q[u];
      acc.v[m] = std::fma(static_cast<float>(t), d, acc.v[m]);
    }
  }
  static float sum(const Acc& acc, int) {
    float s[4];
    for (int l = 0; l < 4; ++l) s[l] = acc.v[l] + acc.v[l + 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
  }
};

// The attention loops (attention_rows_loops.h) over 8 lanes, each multiply-add fused as the vector
// sets' are, so that all give the same bits.
struct PortableRows {
  struct Vec {
    float v[8];
  };
  static Vec zero() { return Vec{}; }
  static Vec broadcast(float x) {
    Vec r;
    for (float& v : r.v) v = x;
    return r;
  }
  template <class T>
  static Vec load(const T* p) {
    Vec r;
    for (int l = 0; l < 8; ++l) r.v[l] = scalar(p + l);
    return r;
  }
  static void store(float* p, const Vec& v) { std::memcpy(p, v.v, sizeof v.v); }
  static Vec fma(const Vec& a, const Vec& b, Vec c) {
    for (int l = 0; l < 8; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  static float fma1(float a, float b, float c) { return std::fma(a, b, c); }
  static float sum8(const Vec& a) {
    float s[4];
    for (int l = 0; l < 4; ++l) s[l] = a.v[l] + a.v[l + 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
  }
  static float scalar(const float* p) { return *p; }
  static float scalar(const Bf16* p) { return bf16_to_f32(p->bits); }
  static float scalar(const F16* p) { return f16_to_f32(p->bits); }
};

}  // namespace

const SkinnyKernels kSkinnyPortable = {skinny<Portable, float>,
                                       skinny<Portable, Bf16>,
                                       skinny<Portable, F16>,
                                       skinny<Portable, Q8Block>,
                                       skinny_int8<PortableInt8>,
                                       skinny<Portable, Bf16>,
                                       attention_loops<PortableRows, float>(),
                                       attention_loops<PortableRows, Bf16>(),
                                       attention_loops<PortableRows, F16>()};

}  // namespace photon::cpu
