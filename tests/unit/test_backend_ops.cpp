// The per-op test (backend_ops.h): every call of the Backend interface, over its table of shapes,
// weight types (f32, bf16, f16, q8) and KV cache types (f32, bf16, f16), on each backend under
// test against the oracle (the CPU backend with portable kernels), and the oracle against
// references computed here in double precision (16-bit roundings and q8 blocks included,
// independently of core/dtype); the
// op contract (backend.h) refusing broken operands on every backend. Inputs are random but fixed
// (seeded per table), so the oracle and the backend see the same values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_ops.h"
#include "core/error.h"
#include "core/sampling.h"

namespace photon::testing {

using Kind = Tolerance::Kind;

void BackendOps::SetUp() {
  const BackendUnderTest& entry = GetParam();
  try {
    backend_ = entry.make();
    if (entry.twin) twin_ = entry.twin();
  } catch (const Error& e) {
    if (e.status() != entry.skip_status) throw;
    GTEST_SKIP() << entry.skip_prefix << e.what();
  }
  if (!entry.oracle)
    oracle_ = std::make_unique<cpu::CpuBackend>(0, cpu::CpuKernels::Portable, entry.precision);
}

namespace {

// ---- 16-bit values, rounded and widened here from their definitions ----------------------------

// x rounded to bf16 (8 significant bits, to nearest, ties to even), as f32.
float bf16_value(float x) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  int exponent = 0;
  const double mantissa = std::frexp(static_cast<double>(x), &exponent);  // in [0.5, 1)
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(mantissa, 8)), exponent - 8));
}

// x rounded to IEEE binary16 (11 significant bits down to 2^-14, then steps of 2^-24; to nearest,
// ties to even; beyond 65504 infinite), as f32.
float f16_value(float x) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  int exponent = 0;
  const double mantissa = std::frexp(static_cast<double>(x), &exponent);  // in [0.5, 1)
  const int bits = std::min(11, exponent + 24);
  const double value = std::ldexp(std::nearbyint(std::ldexp(mantissa, bits)), exponent - bits);
  return std::fabs(value) > 65504.0 ? std::copysign(INFINITY, x) : static_cast<float>(value);
}

float rounded(DType type, float x) {
  return type == DType::BF16 ? bf16_value(x) : type == DType::F16 ? f16_value(x) : x;
}

// The stored bits of a value that `type` holds exactly, and back.
uint16_t bits16(DType type, float value) {
  uint16_t bits = 0;
  if (type == DType::BF16) {
    uint32_t u = 0;
    std::memcpy(&u, &value, 4);
    bits = static_cast<uint16_t>(u >> 16);
  } else {  // sign, 5 exponent bits (bias 15), 10 fraction bits; 0 exponent: steps of 2^-24
    const double a = std::fabs(static_cast<double>(value));
    bits = std::signbit(value) ? 0x8000 : 0;
    if (std::isinf(value)) {
      bits |= 0x7c00;
    } else if (a < 0x1p-14) {
      bits |= static_cast<uint16_t>(std::ldexp(a, 24));
    } else {
      int exponent = 0;
      const double mantissa = std::frexp(a, &exponent);  // a = mantissa 2^exponent
      bits |= static_cast<uint16_t>((exponent + 14) << 10);
      bits |= static_cast<uint16_t>(std::ldexp(mantissa, 11) - 1024.0);
    }
  }
  return bits;
}

float widened(DType type, uint16_t bits) {
  if (type == DType::BF16) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f = 0.0f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int exponent = (bits >> 10) & 31, fraction = bits & 1023;
  const double magnitude = exponent == 0    ? std::ldexp(fraction, -24)
                           : exponent == 31 ? (fraction ? NAN : INFINITY)
                                            : std::ldexp(1024 + fraction, exponent - 25);
  return static_cast<float>((bits & 0x8000) ? -magnitude : magnitude);
}

// q8 by its definition: per 32 values a bf16 scale d = max |w| / 127 (rounded), then 32 bytes
// q = w / d rounded and clamped to [-127, 127], standing for d * q.
std::vector<uint8_t> q8_blocks(const std::vector<float>& wanted) {
  std::vector<uint8_t> blocks;
  for (size_t b = 0; b < wanted.size(); b += 32) {
    float largest = 0.0f;
    for (size_t i = b; i < b + 32; ++i) largest = std::max(largest, std::fabs(wanted[i]));
    const float d = bf16_value(largest / 127.0f);
    const uint16_t scale = bits16(DType::BF16, d);
    blocks.push_back(static_cast<uint8_t>(scale & 0xFF));
    blocks.push_back(static_cast<uint8_t>(scale >> 8));
    for (size_t i = b; i < b + 32; ++i) {
      const double q = d == 0.0f ? 0.0 : std::clamp(std::nearbyint(wanted[i] / d), -127.0f, 127.0f);
      blocks.push_back(static_cast<uint8_t>(static_cast<int8_t>(q)));
    }
  }
  return blocks;
}

std::vector<float> q8_values(const uint8_t* blocks, size_t n) {
  std::vector<float> values(n);
  for (size_t b = 0; b < n / 32; ++b) {
    const uint8_t* block = blocks + b * 34;
    const float d = widened(DType::BF16, static_cast<uint16_t>(block[0] | (block[1] << 8)));
    for (size_t i = 0; i < 32; ++i)
      values[b * 32 + i] = d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
  }
  return values;
}

// Values as a tensor of `dtype` holds them: the f32 values (rounded to the type) and the bytes.
struct Stored {
  DType dtype;
  std::vector<float> values;
  std::vector<uint16_t> bits;   // the 16-bit types' storage
  std::vector<uint8_t> blocks;  // q8's

  Stored(DType type, const std::vector<float>& wanted) : dtype(type), values(wanted.size()) {
    if (type == DType::Q8) {
      blocks = q8_blocks(wanted);
      values = q8_values(blocks.data(), wanted.size());
      return;
    }
    for (size_t i = 0; i < wanted.size(); ++i) values[i] = rounded(type, wanted[i]);
    if (type == DType::F32) return;
    bits.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) bits[i] = bits16(type, values[i]);
  }
  const void* data() const {
    if (dtype == DType::Q8) return blocks.data();
    return dtype == DType::F32 ? static_cast<const void*>(values.data()) : bits.data();
  }
  HostWeight weight(int64_t rows, int64_t cols) const { return {data(), dtype, rows, cols}; }
};

// ---- inputs and outputs in a backend's memory ---------------------------------------------------

std::vector<float> random(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int uniform_int(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

Matrix put(Backend& b, const Stored& s, int64_t rows, int64_t cols) {
  Matrix m = new_matrix(b, rows, cols, "test input", s.dtype);
  b.upload(m, s.data());
  return m;
}

Matrix put(Backend& b, const std::vector<float>& values, int64_t rows, int64_t cols) {
  return put(b, Stored(DType::F32, values), rows, cols);
}

// A [rows, cols] tensor whose every byte is 0xFF (NaN in each type): what no op writes stays NaN.
Matrix poisoned(Backend& b, int64_t rows, int64_t cols, DType dtype = DType::F32) {
  Matrix m = new_matrix(b, rows, cols, "test output", dtype);
  b.upload(m, std::vector<uint8_t>(m.tensor().bytes(), 0xFF).data());
  return m;
}

// A tensor's values as f32 (16-bit types widened, q8 dequantized).
std::vector<float> get(Backend& b, const Tensor& t) {
  const size_t n = static_cast<size_t>(t.rows * t.cols);
  std::vector<float> values(n);
  if (t.dtype == DType::Q8) {
    std::vector<uint8_t> blocks(t.bytes());
    b.download(blocks.data(), t);
    values = q8_values(blocks.data(), n);
  } else if (t.dtype == DType::F32) {
    b.download(values.data(), t);
  } else {
    std::vector<uint16_t> bits(n);
    b.download(bits.data(), t);
    for (size_t i = 0; i < n; ++i) values[i] = widened(t.dtype, bits[i]);
  }
  return values;
}

std::vector<double> as_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

void append(std::vector<float>& to, const std::vector<float>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  uint32_t x = 0, y = 0;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// Whether got comes as close to want as t says (bounds: per element, for Kind::Rounding, times
// `factor`). NaN where want has NaN (an element the op must leave alone) and nowhere else.
::testing::AssertionResult agree(const std::vector<float>& got, const std::vector<double>& want,
                                 const Tolerance& t, const std::vector<double>& bounds,
                                 double factor) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " values, expected " << want.size();
  size_t bad = 0, first = 0;
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float w = static_cast<float>(want[i]);
    bool ok = true;
    if (std::isnan(want[i]) || std::isnan(got[i]) || !std::isfinite(got[i])) {
      ok = std::isnan(want[i]) == std::isnan(got[i]) &&
           (std::isnan(want[i]) || same_bits(got[i], w));
    } else {
      switch (t.kind) {
        case Kind::Bits: ok = same_bits(got[i], w); break;
        case Kind::Bf16: ok = same_bits(got[i], bf16_value(w)); break;
        case Kind::Rounding: ok = std::fabs(got[i] - want[i]) <= factor * bounds.at(i); break;
        case Kind::Absolute: ok = std::fabs(got[i] - want[i]) <= t.bound; break;
        case Kind::Relative:
          diff += (got[i] - want[i]) * (got[i] - want[i]);
          norm += want[i] * want[i];
          break;
      }
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad > 0)
    return ::testing::AssertionFailure()
           << bad << " of " << got.size() << " values differ, the first at " << first << ": "
           << got[first] << " for " << want[first];
  if (t.kind == Kind::Relative) {
    const double relative = std::sqrt(diff) / std::sqrt(norm > 0.0 ? norm : 1.0);
    if (relative > t.bound)
      return ::testing::AssertionFailure() << "relative error " << relative << " above " << t.bound;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

void BackendOps::verify(const std::string& what, Op op, DType dtype, int64_t rows,
                        const std::function<std::vector<float>(Backend&)>& run,
                        const std::vector<double>& reference, const Tolerance& reference_tolerance,
                        const std::vector<double>& bounds, const Tolerance* fixed) {
  const BackendUnderTest& entry = GetParam();
  const std::vector<float> got = run(*backend_);
  if (entry.oracle) {
    EXPECT_TRUE(agree(got, reference, fixed ? *fixed : reference_tolerance, bounds, 1.0))
        << what << ": the oracle against the double-precision reference";
  } else {
    EXPECT_TRUE(agree(got, as_double(run(*oracle_)),
                      fixed ? *fixed : entry.tolerance(op, dtype, rows), bounds, 2.0))
        << what << ": " << entry.label << " against the portable CPU backend";
  }
  if (twin_) {
    EXPECT_TRUE(agree(got, as_double(run(*twin_)),
                      fixed ? *fixed : entry.twin_tolerance(op, dtype, rows), bounds, 2.0))
        << what << ": " << entry.label << " against " << entry.twin_label;
  }
}

namespace {

// The element types: of the tensors Transfer and CopyRows move, and of KV caches.
constexpr DType kTypes[] = {DType::F32, DType::BF16, DType::F16};
const Tolerance kBits{Kind::Bits};

std::string type_name(DType t) {
  return dtype_name(t);
}

// The f32 rounding bound of each element of y (+)= x w^T (+ bias), as Kind::Rounding states it.
double rounding_bound(double magnitude, int in) {
  return magnitude * 1e-6 * (4 + in / 64.0);
}

}  // namespace

// ---- memory -------------------------------------------------------------------------------------

TEST_P(BackendOps, Transfer) {
  std::mt19937 rng(1);
  for (DType dtype : kTypes) {
    const Stored all(dtype, random(rng, 7 * 13, -3.0f, 3.0f));
    const Stored part(dtype, random(rng, 3 * 13, -3.0f, 3.0f));
    auto run = [&](Backend& b) {
      // Rows 2 .. 4 of a poisoned matrix uploaded, the rest left alone; a slice downloaded.
      const Matrix m = poisoned(b, 7, 13, dtype);
      b.upload(m.slice(2, 3), part.data());
      std::vector<float> out = get(b, m);
      const Matrix whole = put(b, all, 7, 13);
      append(out, get(b, whole.slice(1, 4)));
      return out;
    };
    std::vector<double> want(7 * 13, NAN);
    std::copy(part.values.begin(), part.values.end(), want.begin() + 2 * 13);
    want.insert(want.end(), all.values.begin() + 13, all.values.begin() + 5 * 13);
    verify(type_name(dtype), Op::Transfer, dtype, 7, run, want, kBits);
  }
}

TEST_P(BackendOps, Weight) {
  std::mt19937 rng(2);
  for (DType dtype : GetParam().weight_types) {
    const int64_t cols = dtype == DType::Q8 ? 64 : 40;
    for (const int64_t rows : {30, 1}) {  // a matrix, a vector (norms, biases)
      const Stored source(dtype, random(rng, size_t(rows * cols), -2.0f, 2.0f));
      auto run = [&](Backend& b) {
        const Tensor t = b.weight(source.weight(rows, cols), "test weight");
        if (rows == 1) {
          EXPECT_EQ(t.dtype, DType::F32) << "vectors are f32";
        }
        return get(b, t);
      };
      verify(type_name(dtype) + (rows == 1 ? " vector" : " matrix"), Op::Weight, dtype, rows, run,
             as_double(source.values), kBits);
    }
  }
}

TEST_P(BackendOps, CopyRows) {
  std::mt19937 rng(3);
  const int cols = 12;
  for (DType dtype : {DType::F32, DType::BF16}) {
    const Stored a(dtype, random(rng, 8 * cols)), c(dtype, random(rng, 5 * cols));
    auto run = [&](Backend& b) {
      const Matrix ma = put(b, a, 8, cols), mc = put(b, c, 5, cols);
      // Scattered and disjoint (one launch on a GPU), one of no rows.
      b.copy_rows(std::vector<RowCopy>{{mc.slice(0, 2), ma.slice(5, 2)},
                                       {ma.slice(0, 1), mc.slice(4, 1)},
                                       {mc.slice(2, 1), ma.slice(7, 1)},
                                       {mc.slice(3, 0), ma.slice(0, 0)}});
      // A chain: row 1 <- row 0, then row 2 <- the new row 1: in order.
      b.copy_rows(std::vector<RowCopy>{{ma.row(1), ma.row(0)}, {ma.row(2), ma.row(1)}});
      std::vector<float> out = get(b, ma);
      append(out, get(b, mc));
      return out;
    };
    std::vector<float> ha = a.values, hc = c.values;
    auto copy = [&](std::vector<float>& dst, int d, const std::vector<float>& src, int s, int n) {
      std::copy_n(src.begin() + s * cols, n * cols, dst.begin() + d * cols);
    };
    copy(hc, 0, ha, 5, 2);
    copy(ha, 0, hc, 4, 1);
    copy(hc, 2, ha, 7, 1);
    copy(ha, 1, ha, 0, 1);
    copy(ha, 2, ha, 1, 1);
    std::vector<double> want = as_double(ha);
    want.insert(want.end(), hc.begin(), hc.end());
    verify(type_name(dtype), Op::CopyRows, dtype, 8, run, want, kBits);
  }
}

// ---- ops ----------------------------------------------------------------------------------------

TEST_P(BackendOps, Embed) {
  std::mt19937 rng(4);
  const int vocab = 50;
  for (DType dtype : GetParam().weight_types) {
    const int dim = dtype == DType::Q8 ? 64 : 24;
    const Stored table(dtype, random(rng, vocab * dim, -2.0f, 2.0f));
    for (const size_t n : {size_t{22}, size_t{0}}) {
      std::vector<int32_t> ids(n);
      for (int32_t& id : ids) id = uniform_int(rng, 0, vocab - 1);
      if (n > 0) ids[0] = 0, ids[1] = vocab - 1, ids[2] = ids[3];
      auto run = [&](Backend& b) {
        const Matrix out = poisoned(b, static_cast<int64_t>(n), dim);
        b.embed(b.weight(table.weight(vocab, dim), "table"), ids, out);
        return get(b, out);
      };
      std::vector<double> want;
      for (int32_t id : ids)
        want.insert(want.end(), table.values.begin() + id * dim,
                    table.values.begin() + (id + 1) * dim);
      verify(type_name(dtype) + " table, " + std::to_string(n) + " ids", Op::Embed, dtype,
             static_cast<int64_t>(n), run, want, kBits);
    }
  }
}

TEST_P(BackendOps, Rmsnorm) {
  std::mt19937 rng(5);
  // One row of a stack, a chunker's concatenation (4 x 1664), odd widths.
  for (const auto& shape : {std::pair{1, 64}, {7, 13}, {33, 416}, {3, 6656}, {5, 1}}) {
    const int n = shape.first, d = shape.second;  // plain names: the lambdas below capture them
    const std::vector<float> x = random(rng, size_t(n) * d, -3.0f, 3.0f), w = random(rng, d);
    for (const float eps : {1e-5f, 1e-6f}) {
      std::vector<double> want(x.size());
      for (int r = 0; r < n; ++r) {
        double sum = 0.0;
        for (int i = 0; i < d; ++i) sum += double(x[r * d + i]) * x[r * d + i];
        const double scale = 1.0 / std::sqrt(sum / d + eps);
        for (int i = 0; i < d; ++i) want[r * d + i] = x[r * d + i] * scale * w[i];
      }
      for (bool in_place : {false, true}) {
        auto run = [&](Backend& b) {
          const Matrix xm = put(b, x, n, d), ym = poisoned(b, n, d);
          const Tensor& y = in_place ? xm.tensor() : ym.tensor();
          b.rmsnorm(xm, b.weight({w.data(), DType::F32, 1, d}, "norm"), y, eps);
          return get(b, y);
        };
        verify(std::to_string(n) + " x " + std::to_string(d) + (in_place ? " in place" : ""),
               Op::Rmsnorm, DType::F32, n, run, want, {Kind::Relative, 1e-6});
      }
    }
  }
}

struct LinearCase {
  int n, in, out;
  int offset;  // rows before x, w and y in their buffers (unaligned 16-bit rows when in is odd)
};

TEST_P(BackendOps, Linear) {
  // Decoding rows, the tiles' tails, a 300-row prompt (the CPU's blocked loops; two GEMMs on a
  // GPU), a wide LM-head-like product, and rows at unaligned offsets.
  // q8 runs the cases whose rows are whole blocks of 32.
  const LinearCase cases[] = {{1, 64, 48, 0},  {3, 130, 66, 0},  {17, 256, 100, 0},
                              {33, 96, 80, 0}, {300, 64, 40, 0}, {2, 256, 4000, 0},
                              {5, 52, 96, 1},  {40, 26, 33, 3},  {7, 96, 50, 2}};
  std::mt19937 rng(6);
  for (const LinearCase& c : cases) {
    const std::vector<float> x = random(rng, size_t(c.n + c.offset) * c.in, -2.0f, 2.0f);
    const std::vector<float> w = random(rng, size_t(c.out + c.offset) * c.in, -0.3f, 0.3f);
    const std::vector<float> bias = random(rng, c.out);
    const std::vector<float> y0 = random(rng, size_t(c.n + c.offset) * c.out);
    for (DType dtype : GetParam().weight_types) {
      if (dtype == DType::Q8 && c.in % 32 != 0) continue;
      const Stored weights(dtype, w);
      for (const bool extras : {false, true}) {  // bias and accumulation, or neither
        auto run = [&](Backend& b) {
          const Matrix xm = put(b, x, c.n + c.offset, c.in);
          const Matrix ym =
              extras ? put(b, y0, c.n + c.offset, c.out) : poisoned(b, c.n + c.offset, c.out);
          const Tensor wt = b.weight(weights.weight(c.out + c.offset, c.in), "w");
          const Tensor bt = b.weight({bias.data(), DType::F32, 1, c.out}, "bias");
          const Tensor y = ym.slice(c.offset, c.n);
          b.linear(xm.slice(c.offset, c.n), wt.slice(c.offset, c.out), extras ? &bt : nullptr, y,
                   extras);
          return get(b, y);
        };
        std::vector<double> want(size_t(c.n) * c.out), bounds(want.size());
        for (int r = 0; r < c.n; ++r)
          for (int o = 0; o < c.out; ++o) {
            const float* xr = &x[size_t(r + c.offset) * c.in];
            const float* wo = &weights.values[size_t(o + c.offset) * c.in];
            double sum = 0.0, magnitude = 0.0;
            for (int k = 0; k < c.in; ++k) {
              sum += double(xr[k]) * wo[k];
              magnitude += std::fabs(double(xr[k]) * wo[k]);
            }
            const size_t i = size_t(r) * c.out + o;
            if (extras) {
              const double before = y0[size_t(r + c.offset) * c.out + o];
              sum += before + bias[o];
              magnitude += std::fabs(before) + std::fabs(bias[o]);
            }
            want[i] = sum;
            bounds[i] = rounding_bound(magnitude, c.in);
          }
        verify(type_name(dtype) + " n " + std::to_string(c.n) + " in " + std::to_string(c.in) +
                   " out " + std::to_string(c.out) + (extras ? ", bias, accumulate" : ""),
               Op::Linear, dtype, c.n, run, want, {Kind::Rounding}, bounds);
      }
    }
  }
}

TEST_P(BackendOps, LinearGroup) {
  // Q, K, V-like products of one input: one and a few rows, the CPU's blocked loops, two GEMMs on
  // a GPU; one type for all, or three types in a group (f32 first: a GPU converts it to bf16).
  const int in = 64, outs[] = {48, 16, 80};
  const std::vector<DType>& types = GetParam().weight_types;
  const DType mixed[] = {DType::F32, types.back(), DType::BF16};
  std::mt19937 rng(7);
  for (int n : {1, 5, 40, 300}) {
    const std::vector<float> x = random(rng, size_t(n) * in, -2.0f, 2.0f);
    std::vector<std::vector<float>> w, y0;
    for (int out : outs) {
      w.push_back(random(rng, size_t(out) * in, -0.3f, 0.3f));
      y0.push_back(random(rng, size_t(n) * out));
    }
    for (size_t t = 0; t <= types.size(); ++t) {  // each type, then mixed
      const bool one = t < types.size();
      std::vector<Stored> weights;
      for (size_t p = 0; p < 3; ++p) weights.emplace_back(one ? types[t] : mixed[p], w[p]);
      auto run = [&](Backend& b) {
        const Matrix xm = put(b, x, n, in);
        std::vector<Matrix> ys;
        std::vector<LinearOut> group;
        for (size_t p = 0; p < 3; ++p) {
          const bool accumulate = p == 1;
          ys.push_back(accumulate ? put(b, y0[p], n, outs[p]) : poisoned(b, n, outs[p]));
          group.push_back({b.weight(weights[p].weight(outs[p], in), "w"), ys.back(), accumulate});
        }
        b.linear_group(xm, group);
        std::vector<float> out;
        for (const Matrix& y : ys) append(out, get(b, y));
        return out;
      };
      std::vector<double> want, bounds;
      for (size_t p = 0; p < 3; ++p)
        for (int r = 0; r < n; ++r)
          for (int o = 0; o < outs[p]; ++o) {
            double sum = p == 1 ? y0[p][size_t(r) * outs[p] + o] : 0.0;
            double magnitude = std::fabs(sum);
            for (int k = 0; k < in; ++k) {
              const double term = double(x[size_t(r) * in + k]) * weights[p].values[o * in + k];
              sum += term;
              magnitude += std::fabs(term);
            }
            want.push_back(sum);
            bounds.push_back(rounding_bound(magnitude, in));
          }
      verify((one ? type_name(types[t]) : std::string("mixed")) + " n " + std::to_string(n),
             Op::LinearGroup, one ? types[t] : DType::F32, n, run, want, {Kind::Rounding}, bounds);
    }
  }
}

// cos and sin of p theta^(-2i / head_dim) in long double: [2n, head_dim / 2], cosines first.
std::vector<double> rope_reference(const std::vector<int64_t>& positions, int head_dim,
                                   float theta) {
  const int n = static_cast<int>(positions.size()), half = head_dim / 2;
  std::vector<double> table(2 * size_t(n) * half);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < half; ++i) {
      const long double angle =
          positions[r] * std::pow(static_cast<long double>(theta), -2.0L * i / head_dim);
      table[size_t(r) * half + i] = static_cast<float>(std::cos(angle));
      table[size_t(n + r) * half + i] = static_cast<float>(std::sin(angle));
    }
  return table;
}

TEST_P(BackendOps, RopeTable) {
  std::mt19937 rng(8);
  for (const int head_dim : {8, 52, 128}) {
    for (const float theta : {10000.0f, 500000.0f}) {
      std::vector<int64_t> positions(33);
      for (int64_t& p : positions) p = uniform_int(rng, 0, 1 << 20);  // angles far past 2 pi
      positions[0] = 0;
      positions[1] = 1;
      auto run = [&](Backend& b) {
        const Matrix table = poisoned(b, 2 * int64_t(positions.size()), head_dim / 2);
        b.rope_table(positions, head_dim, theta, table);
        return get(b, table);
      };
      // Within one f32 step of values at most 1, where the long double lies next to a rounding
      // boundary.
      verify("head_dim " + std::to_string(head_dim) + " theta " + std::to_string(theta),
             Op::RopeTable, DType::F32, 33, run, rope_reference(positions, head_dim, theta),
             {Kind::Absolute, 1.2e-7});
    }
  }
}

TEST_P(BackendOps, Rope) {
  std::mt19937 rng(9);
  for (const auto& shape : {std::tuple{5, 4, 8}, {33, 6, 64}, {3, 2, 52}, {2, 32, 128}}) {
    // Plain names: the lambdas below capture them.
    const int n = std::get<0>(shape), heads = std::get<1>(shape), head_dim = std::get<2>(shape);
    std::vector<int64_t> positions(n);
    for (int64_t& p : positions) p = uniform_int(rng, 0, 5000);
    const std::vector<double> table64 = rope_reference(positions, head_dim, 10000.0f);
    const std::vector<float> table(table64.begin(), table64.end());
    const std::vector<float> x = random(rng, size_t(n) * heads * head_dim, -2.0f, 2.0f);
    const int half = head_dim / 2;
    std::vector<double> want(x.size());
    for (int r = 0; r < n; ++r)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i) {
          const size_t at = (size_t(r) * heads + h) * head_dim + i;
          const double c = table[size_t(r) * half + i], s = table[size_t(n + r) * half + i];
          want[at] = x[at] * c - x[at + half] * s;
          want[at + half] = x[at + half] * c + x[at] * s;
        }
    auto run = [&](Backend& b) {
      const Matrix t = put(b, table, 2 * n, half), xm = put(b, x, n, heads * head_dim);
      b.rope(xm, heads, t);
      return get(b, xm);
    };
    verify(std::to_string(n) + " rows, " + std::to_string(heads) + " x " + std::to_string(head_dim),
           Op::Rope, DType::F32, n, run, want, {Kind::Relative, 1e-6});
  }
}

TEST_P(BackendOps, Swiglu) {
  std::mt19937 rng(10);
  for (const auto& shape : {std::pair{1, 7}, {33, 416}, {3, 4103}}) {
    const int n = shape.first, f = shape.second;  // plain names: the lambdas below capture them
    const std::vector<float> gate = random(rng, size_t(n) * f, -8.0f, 8.0f);
    const std::vector<float> up = random(rng, size_t(n) * f, -2.0f, 2.0f);
    std::vector<double> want(gate.size());
    for (size_t i = 0; i < gate.size(); ++i)
      want[i] = gate[i] / (1.0 + std::exp(-double(gate[i]))) * up[i];
    auto run = [&](Backend& b) {
      const Matrix g = put(b, gate, n, f), u = put(b, up, n, f);
      b.swiglu(g, u);
      return get(b, g);
    };
    verify(std::to_string(n) + " x " + std::to_string(f), Op::Swiglu, DType::F32, n, run, want,
           {Kind::Relative, 1e-6});
  }
}

// Segments of a call: rows and the position they start at; row0 follows from the order (one
// unused row before `gap` segments).
struct SegmentSpec {
  int rows, start;
  bool gap = false;
};

// The caches' contents of a segment: [capacity, kv_dim] values of its type, NaN past `filled`.
struct CacheSpec {
  DType type;
  int capacity;
};

TEST_P(BackendOps, KvAppend) {
  std::mt19937 rng(11);
  const int kv_dim = 32;
  const std::vector<SegmentSpec> specs = {{3, 0}, {1, 10}, {0, 4}, {4, 5, true}, {2, 1}};
  for (int types = 0; types < 4; ++types) {  // f32, bf16, f16, mixed
    std::vector<AttentionSegment> layout;
    std::vector<CacheSpec> caches;
    int row = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      row += specs[i].gap;
      layout.push_back({row, specs[i].rows, specs[i].start});
      caches.push_back({kTypes[types < 3 ? types : i % 3], specs[i].start + specs[i].rows + 2});
      row += specs[i].rows;
    }
    const int n = row;
    const std::vector<float> k = random(rng, size_t(n) * kv_dim, -2.0f, 2.0f);
    const std::vector<float> v = random(rng, size_t(n) * kv_dim, -2.0f, 2.0f);
    auto run = [&](Backend& b) {
      std::vector<Matrix> held;
      std::vector<AttentionSegment> segments = layout;
      for (size_t i = 0; i < segments.size(); ++i) {
        held.push_back(poisoned(b, caches[i].capacity, kv_dim, caches[i].type));
        segments[i].k = held.back();
        held.push_back(poisoned(b, caches[i].capacity, kv_dim, caches[i].type));
        segments[i].v = held.back();
      }
      b.kv_append(put(b, k, n, kv_dim), put(b, v, n, kv_dim), segments);
      std::vector<float> out;
      for (const Matrix& m : held) append(out, get(b, m));
      return out;
    };
    std::vector<double> want;
    for (size_t i = 0; i < layout.size(); ++i)
      for (const std::vector<float>* values : {&k, &v})
        for (int p = 0; p < caches[i].capacity; ++p)
          for (int e = 0; e < kv_dim; ++e) {
            const int r = layout[i].row0 + p - layout[i].start;
            const bool written = p >= layout[i].start && p < layout[i].start + layout[i].rows;
            want.push_back(written ? rounded(caches[i].type, (*values)[size_t(r) * kv_dim + e])
                                   : NAN);
          }
    verify(types < 3 ? type_name(kTypes[types]) + " caches" : "mixed caches", Op::KvAppend,
           types < 3 ? kTypes[types] : DType::F32, n, run, want, kBits);
  }
}

TEST_P(BackendOps, Attention) {
  // A fresh prompt and a continued one (tiled on a GPU, with a partial last tile), local
  // windows, rows beyond one key block (512 keys on the CPU; split over blocks on a GPU), one row
  // outside every segment, in one call as the engine batches them.
  const std::vector<SegmentSpec> specs = {{100, 0}, {45, 37}, {3, 2},   {5, 0, true},
                                          {1, 700}, {1, 0},   {16, 16}, {1, 1999}};
  const AttentionShape shapes[] = {{4, 2, 8}, {8, 2, 64}, {4, 4, 6}, {2, 1, 160}, {32, 32, 52}};
  std::mt19937 rng(12);
  for (const AttentionShape& shape : shapes) {
    const int kv_dim = shape.kv_dim(), q_dim = shape.q_dim();
    for (int types = 0; types < 4; ++types) {  // f32, bf16, f16, mixed
      if (types == 3 && shape.head_dim != 64) continue;
      std::vector<AttentionSegment> layout;
      std::vector<Stored> keys, values;
      std::vector<int> capacity;
      int row = 0;
      for (size_t i = 0; i < specs.size(); ++i) {
        row += specs[i].gap;
        layout.push_back({row, specs[i].rows, specs[i].start});
        row += specs[i].rows;
        const DType type = kTypes[types < 3 ? types : i % 3];
        const size_t filled = size_t(specs[i].start + specs[i].rows) * kv_dim;
        keys.emplace_back(type, random(rng, filled, -2.0f, 2.0f));
        values.emplace_back(type, random(rng, filled, -2.0f, 2.0f));
        capacity.push_back(specs[i].start + specs[i].rows + 3);
      }
      const int n = row;
      const std::vector<float> q = random(rng, size_t(n) * q_dim, -2.0f, 2.0f);
      auto run = [&](Backend& b) {
        std::vector<Matrix> held;
        std::vector<AttentionSegment> segments = layout;
        for (size_t i = 0; i < segments.size(); ++i) {
          const int filled = layout[i].start + layout[i].rows;
          for (const Stored* s : {&keys[i], &values[i]}) {
            held.push_back(poisoned(b, capacity[i], kv_dim, s->dtype));
            b.upload(held.back().slice(0, filled), s->data());
          }
          segments[i].k = held[held.size() - 2];
          segments[i].v = held.back();
        }
        const Matrix out = poisoned(b, n, q_dim);
        b.attention(put(b, q, n, q_dim), shape, segments, out);
        return get(b, out);
      };
      std::vector<double> want(q.size(), NAN);
      const int d = shape.head_dim, group = shape.heads / shape.kv_heads;
      for (size_t s = 0; s < layout.size(); ++s)
        for (int i = 0; i < layout[s].rows; ++i) {
          const int r = layout[s].row0 + i, keys_n = layout[s].start + i + 1;
          for (int h = 0; h < shape.heads; ++h) {
            const float* qh = &q[(size_t(r) * shape.heads + h) * d];
            const size_t kv = size_t(h / group) * d;
            std::vector<double> weight(keys_n);
            double max = -INFINITY, sum = 0.0;
            for (int j = 0; j < keys_n; ++j) {
              double dot = 0.0;
              for (int e = 0; e < d; ++e)
                dot += double(qh[e]) * keys[s].values[j * kv_dim + kv + e];
              weight[j] = dot / std::sqrt(double(d));
              max = std::max(max, weight[j]);
            }
            for (double& w : weight) sum += (w = std::exp(w - max));
            for (int e = 0; e < d; ++e) {
              double acc = 0.0;
              for (int j = 0; j < keys_n; ++j)
                acc += weight[j] * values[s].values[j * kv_dim + kv + e];
              want[(size_t(r) * shape.heads + h) * d + e] = acc / sum;
            }
          }
        }
      verify(std::to_string(shape.heads) + "/" + std::to_string(shape.kv_heads) + " heads x " +
                 std::to_string(d) + ", " +
                 (types < 3 ? type_name(kTypes[types]) + " caches" : "mixed caches"),
             Op::Attention, types < 3 ? kTypes[types] : DType::F32, n, run, want,
             {Kind::Relative, 1e-5});
    }
  }
}

// ---- results for the host -----------------------------------------------------------------------

// The token photon.h's sampling rules choose, computed from their text.
int32_t reference_token(const SamplerConfig& config, std::vector<float> logits,
                        std::span<const int32_t> history, int64_t position) {
  const int vocab = static_cast<int>(logits.size());
  for (const LogitBias& entry : config.logit_bias) logits[entry.token] += entry.bias;
  if (config.penalized()) {
    const size_t last = std::min(history.size(), size_t(config.repetition_last_n));
    std::map<int32_t, int> counts;
    for (const int32_t t : history.last(last)) ++counts[t];
    for (const auto& [t, count] : counts) {
      const float l = logits[t] > 0 ? logits[t] / config.repetition_penalty
                                    : logits[t] * config.repetition_penalty;
      logits[t] = l - std::fma(float(count), config.frequency_penalty, config.presence_penalty);
    }
  }
  std::vector<int32_t> ids(vocab);
  for (int i = 0; i < vocab; ++i) ids[i] = i;
  // Ranked by logit, the lower id first on ties.
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (config.temperature <= 0.0f) return ids[0];
  const bool ranked =
      (config.top_k > 0 && config.top_k < vocab) || config.top_p < 1.0f || config.min_p > 0.0f;
  if (config.top_k > 0 && config.top_k < vocab) ids.resize(config.top_k);
  const float max = logits[ids[0]];
  std::vector<double> p(ids.size());
  double total = 0.0;
  for (size_t i = 0; i < ids.size(); ++i)
    total += p[i] = std::exp((double(logits[ids[i]]) - max) / config.temperature);
  if (config.top_p < 1.0f || config.min_p > 0.0f) {
    size_t keep = 0;
    double mass = 0.0;
    while (keep < ids.size() && p[keep] >= config.min_p * p[0]) {
      mass += p[keep++];
      if (mass >= config.top_p * total) break;
    }
    keep = std::max<size_t>(keep, 1);
    ids.resize(keep);
    p.resize(keep);
    total = 0.0;
    for (double x : p) total += x;
  }
  if (!ranked) {  // drawn in id order
    std::vector<size_t> order(ids.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
    std::vector<int32_t> by_id;
    std::vector<double> p_by_id;
    for (size_t i : order) by_id.push_back(ids[i]), p_by_id.push_back(p[i]);
    ids = by_id;
    p = p_by_id;
  }
  const double target = sample_uniform(config.seed, position) * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < ids.size(); ++i)
    if (target < (cumulative += p[i])) return ids[i];
  return ids.back();
}

double log_softmax_at(const float* row, int vocab, int32_t token) {
  double max = row[0];
  for (int i = 1; i < vocab; ++i) max = std::max(max, double(row[i]));
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - max);
  return row[token] - max - std::log(sum);
}

SamplerConfig sampler(float temperature, int top_k, float top_p, float min_p, float penalty) {
  SamplerConfig c;
  c.temperature = temperature;
  c.top_k = top_k;
  c.top_p = top_p;
  c.min_p = min_p;
  c.repetition_penalty = penalty;
  return c;
}

SamplerConfig with_penalties(SamplerConfig c, float presence, float frequency) {
  c.presence_penalty = presence;
  c.frequency_penalty = frequency;
  return c;
}

// Ids below 7, the smallest vocabulary sampled.
SamplerConfig with_bias(SamplerConfig c) {
  c.logit_bias = {{0, 3.0f}, {2, -100.0f}, {6, 1.5f}};
  return c;
}

TEST_P(BackendOps, Sample) {
  const SamplerConfig kinds[] = {
      sampler(0.0f, 0, 1.0f, 0.0f, 1.0f),         // greedy
      sampler(0.8f, 0, 1.0f, 0.0f, 1.0f),         // temperature
      sampler(1.0f, 40, 1.0f, 0.0f, 1.0f),        // top-k
      sampler(1.3f, 1, 1.0f, 0.0f, 1.0f),         // top-k 1
      sampler(0.7f, 0, 0.9f, 0.0f, 1.0f),         // top-p
      sampler(1.0f, 0, 1e-6f, 0.0f, 1.0f),        // a top-p that keeps one token
      sampler(1.0f, 0, 1.0f, 0.05f, 1.0f),        // min-p
      sampler(1.1f, 50, 0.8f, 0.01f, 1.0f),       // all three
      sampler(0.9f, 1 << 20, 0.95f, 0.0f, 1.0f),  // top-k beyond the vocabulary
      sampler(0.0f, 0, 1.0f, 0.0f, 1.3f),         // penalized greedy
      sampler(0.9f, 20, 1.0f, 0.0f, 1.5f),        // penalized top-k
      sampler(1.2f, 0, 1.0f, 0.0f, 0.8f),         // a penalty below 1
      with_penalties(sampler(0.0f, 0, 1.0f, 0.0f, 1.0f), 0.5f, 0.7f),   // greedy, OpenAI's
      with_penalties(sampler(1.0f, 0, 1.0f, 0.0f, 1.0f), 0.0f, -0.4f),  // favouring repeats
      with_penalties(sampler(0.8f, 0, 0.9f, 0.0f, 1.2f), 1.0f, 0.3f),   // all three, top-p
      with_bias(sampler(0.0f, 0, 1.0f, 0.0f, 1.0f)),                    // greedy
      with_bias(sampler(1.0f, 0, 1.0f, 0.0f, 1.0f)),                    // temperature
      with_bias(with_penalties(sampler(0.9f, 20, 1.0f, 0.0f, 1.1f), 0.2f, 0.2f)),  // everything
  };
  struct Batch {
    int vocab;
    bool ties;  // integer logits in [-3, 3], both zeros among them: only the ids order candidates
    size_t kinds;  // the first this many of kinds[]
    int rows;      // per kind
  };
  // Past 128 rows a GPU samples rows that rank or penalize in chunks; greedy and temperature
  // rows alone go in one launch.
  const Batch batches[] = {{7, false, std::size(kinds), 2},
                           {7, true, std::size(kinds), 2},
                           {1000, false, std::size(kinds), 12},
                           {1000, true, std::size(kinds), 2},
                           {1000, false, 2, 150}};
  std::mt19937 rng(13);
  for (const Batch& batch : batches) {
    // Plain names: the lambdas below capture them.
    const int vocab = batch.vocab, per_kind = batch.rows;
    const bool ties = batch.ties;
    const size_t kind_count = batch.kinds;
    const int n = static_cast<int>(kind_count) * per_kind;
    std::vector<float> logits = random(rng, size_t(n) * vocab, -6.0f, 6.0f);
    if (ties)
      for (float& l : logits)
        l = std::round(l / 2.0f) == 0.0f ? (l < 0 ? -0.0f : 0.0f) : std::round(l / 2.0f);
    std::vector<SamplerConfig> configs;
    std::vector<std::vector<int32_t>> histories(n);
    std::vector<SampleRequest> requests;
    for (int r = 0; r < n; ++r) {
      configs.push_back(kinds[r / per_kind]);
      configs.back().seed = 1000 + r;
      for (int i = 0; i < 100; ++i)
        histories[r].push_back(uniform_int(rng, 0, std::min(vocab, 50) - 1));
    }
    for (int r = 0; r < n; ++r)
      requests.push_back({&configs[r], uniform_int(rng, 0, 1 << 30), histories[r]});
    std::vector<double> want_tokens, want_logprobs;
    for (int r = 0; r < n; ++r) {
      const float* row = &logits[size_t(r) * vocab];
      const int32_t token = reference_token(configs[r], std::vector<float>(row, row + vocab),
                                            histories[r], requests[r].position);
      want_tokens.push_back(token);
      want_logprobs.push_back(log_softmax_at(row, vocab, token));
    }
    auto sample = [&](Backend& b, bool logprobs_wanted) {
      const Matrix lm = put(b, logits, n, vocab);
      std::vector<int32_t> tokens(n, -1);
      std::vector<float> logprobs(n, NAN);
      b.sample(lm, requests, tokens.data(), logprobs.data());
      EXPECT_EQ(get(b, lm), logits) << "the logits stay as they were";
      if (logprobs_wanted) return logprobs;
      return std::vector<float>(tokens.begin(), tokens.end());
    };
    const std::string what = std::to_string(n) + " rows of a vocabulary of " +
                             std::to_string(vocab) + (ties ? ", ties" : "");
    verify(
        what + ", tokens", Op::Sample, DType::F32, n, [&](Backend& b) { return sample(b, false); },
        want_tokens, kBits, {}, &kBits);
    verify(what + ", log-probabilities", Op::Sample, DType::F32, n,
           [&](Backend& b) { return sample(b, true); }, want_logprobs, {Kind::Relative, 1e-6});
    // Alternatives: the 5 largest logits of each row (the lower id first on ties), as
    // (id, log-softmax) pairs.
    constexpr int kTop = 5;
    std::vector<SamplerConfig> with_top = configs;
    for (SamplerConfig& c : with_top) c.top_logprobs = kTop;
    std::vector<double> want_top;
    for (int r = 0; r < n; ++r) {
      const float* row = &logits[size_t(r) * vocab];
      std::vector<int32_t> ids(vocab);
      for (int i = 0; i < vocab; ++i) ids[i] = i;
      std::stable_sort(ids.begin(), ids.end(),
                       [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      for (int i = 0; i < kTop; ++i) {
        want_top.push_back(ids[i]);
        want_top.push_back(log_softmax_at(row, vocab, ids[i]));
      }
    }
    auto alternatives = [&](Backend& b) {
      const Matrix lm = put(b, logits, n, vocab);
      std::vector<std::vector<TokenLogprob>> tops(n);
      std::vector<SampleRequest> asked = requests;
      for (int r = 0; r < n; ++r) {
        asked[r].config = &with_top[r];
        asked[r].top = &tops[r];
      }
      std::vector<int32_t> tokens(n);
      std::vector<float> logprobs(n);
      b.sample(lm, asked, tokens.data(), logprobs.data());
      std::vector<float> flat;
      for (const auto& top : tops)
        for (const TokenLogprob& t : top) {
          flat.push_back(static_cast<float>(t.token));
          flat.push_back(t.logprob);
        }
      return flat;
    };
    verify(what + ", alternatives", Op::Sample, DType::F32, n, alternatives, want_top,
           {Kind::Relative, 1e-6});
  }
  // Equal logits over 2^16 ids and no cut: the running sums are the integers 1 .. V, exact in
  // double, so the token is floor(u V) of the draw u, and its log-probability -log V.
  const int vocab = 1 << 16, n = 16;
  SamplerConfig flat = sampler(1.0f, 0, 1.0f, 0.0f, 1.0f);
  flat.seed = 77;
  std::vector<SampleRequest> requests;
  std::vector<double> want;
  for (int r = 0; r < n; ++r) {
    requests.push_back({&flat, r * 1009, {}});
    want.push_back(std::floor(sample_uniform(77, r * 1009) * vocab));
  }
  auto run = [&](Backend& b) {
    std::vector<int32_t> tokens(n, -1);
    std::vector<float> logprobs(n, NAN);
    b.sample(put(b, std::vector<float>(size_t(n) * vocab, 0.25f), n, vocab), requests,
             tokens.data(), logprobs.data());
    for (float lp : logprobs) EXPECT_NEAR(lp, -std::log(double(vocab)), 1e-5);
    return std::vector<float>(tokens.begin(), tokens.end());
  };
  verify("equal logits, tokens", Op::Sample, DType::F32, n, run, want, kBits, {}, &kBits);
}

TEST_P(BackendOps, Logprobs) {
  std::mt19937 rng(14);
  for (const int vocab : {7, 1000, 32000}) {
    const int n = 6;
    const std::vector<float> logits = random(rng, size_t(n) * vocab, -12.0f, 12.0f);
    std::vector<int32_t> targets(n);
    for (int32_t& t : targets) t = uniform_int(rng, 0, vocab - 1);
    targets[0] = 0;
    targets[1] = vocab - 1;
    std::vector<double> want;
    for (int r = 0; r < n; ++r)
      want.push_back(log_softmax_at(&logits[size_t(r) * vocab], vocab, targets[r]));
    auto run = [&](Backend& b) {
      std::vector<float> out(n, NAN);
      b.logprobs(put(b, logits, n, vocab), targets, out.data());
      return out;
    };
    verify("vocabulary " + std::to_string(vocab), Op::Logprobs, DType::F32, n, run, want,
           {Kind::Relative, 1e-6});
  }
}

// With alternatives: each row's k likeliest ids, against a float64 ranking of the same logits, and
// the target's logprob equal to its own entry bit for bit.
TEST_P(BackendOps, LogprobsWithAlternatives) {
  Backend& b = backend();
  std::mt19937 rng(15);
  for (const int vocab : {7, 1000}) {
    const int n = 4, k = 5;
    const std::vector<float> logits = random(rng, size_t(n) * vocab, -12.0f, 12.0f);
    std::vector<int32_t> targets(n);
    for (int32_t& t : targets) t = uniform_int(rng, 0, vocab - 1);
    // Row 0's target is its likeliest id.
    targets[0] = int32_t(std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin());
    std::vector<float> out(n, NAN), top_logprobs(size_t(n) * k, NAN);
    std::vector<int32_t> top_ids(size_t(n) * k, -1);
    b.logprobs(put(b, logits, n, vocab), targets, out.data(),
               {k, top_ids.data(), top_logprobs.data()});
    for (int r = 0; r < n; ++r) {
      const float* row = &logits[size_t(r) * vocab];
      std::vector<int32_t> ranked(vocab);
      std::iota(ranked.begin(), ranked.end(), 0);
      std::stable_sort(ranked.begin(), ranked.end(),
                       [row](int32_t a, int32_t c) { return row[a] > row[c]; });
      EXPECT_NEAR(out[r], log_softmax_at(row, vocab, targets[r]), 1e-5) << r;
      for (int j = 0; j < k; ++j) {
        const size_t at = size_t(r) * k + j;
        EXPECT_EQ(top_ids[at], ranked[j])
            << "vocabulary " << vocab << " row " << r << " rank " << j;
        EXPECT_NEAR(top_logprobs[at], log_softmax_at(row, vocab, ranked[j]), 1e-5);
        if (top_ids[at] == targets[r]) {
          EXPECT_EQ(top_logprobs[at], out[r]) << r;
        }
      }
    }
    EXPECT_EQ(top_ids[0], targets[0]);
  }
}

// ---- the op contract ----------------------------------------------------------------------------

// Each broken rule is refused with PHOTON_ERR_INTERNAL and a message naming the call and the
// operand, before anything is computed.
TEST_P(BackendOps, ContractRefusesBrokenOperands) {
  Backend& b = backend();
  auto refused = [&](const std::string& expected, const std::function<void()>& call) {
    try {
      call();
      ADD_FAILURE() << "accepted; expected \"" << expected << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), PHOTON_ERR_INTERNAL) << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << "\"" << e.what() << "\" does not say \"" << expected << "\"";
    }
  };
  const Matrix x = poisoned(b, 3, 8), y = poisoned(b, 3, 6), bf16 = poisoned(b, 3, 8, DType::BF16);
  const std::vector<float> w_values(6 * 8, 0.5f), norm(8, 1.0f);
  const Tensor w = b.weight({w_values.data(), DType::F32, 6, 8}, "w");
  const Tensor norm_w = b.weight({norm.data(), DType::F32, 1, 8}, "norm");
  const std::unique_ptr<Backend> other =
      std::make_unique<cpu::CpuBackend>(1, cpu::CpuKernels::Portable);
  const Matrix elsewhere = poisoned(*other, 3, 8);

  refused("linear: y is 3 x 8 f32, expected 3 x 6", [&] { b.linear(x, w, nullptr, x, false); });
  refused("linear: x is 3 x 8 bf16, expected f32", [&] { b.linear(bf16, w, nullptr, y, false); });
  refused("linear: y shares bytes with x", [&] {
    b.linear(x, w, nullptr, Tensor{x.tensor().buffer, 0, 3, 6, DType::F32}, false);
  });
  refused("linear: bias is 1 x 8 f32, expected 1 x 6", [&] { b.linear(x, w, &norm_w, y, false); });
  refused("linear_group: outs[0].y shares bytes with outs[1].y", [&] {
    b.linear_group(x, std::vector<LinearOut>{{w, y}, {w, y}});
  });
  refused("embed: ids[1] is 6, outside the 6 rows of the table", [&] {
    const std::vector<int32_t> ids = {0, 6};
    b.embed(w, ids, poisoned(b, 2, 8));
  });
  refused("rmsnorm: w is 3 x 8 f32, expected 1 x 8", [&] { b.rmsnorm(x, x, y, 1e-5f); });
  refused("rmsnorm: y shares bytes with x", [&] {
    const Matrix rows = poisoned(b, 4, 8);
    b.rmsnorm(rows.slice(0, 3), norm_w, rows.slice(1, 3), 1e-5f);
  });
  refused("rope_table: table is 3 x 6 f32, expected 6 x 4", [&] {
    const std::vector<int64_t> positions = {0, 1, 2};
    b.rope_table(positions, 8, 10000.0f, y);
  });
  refused("rope_table: head_dim is 7, expected an even number", [&] {
    const std::vector<int64_t> positions = {0};
    b.rope_table(positions, 7, 10000.0f, poisoned(b, 2, 3));
  });
  refused("rope: the head size is 3, expected an even number",
          [&] { b.rope(y, 2, poisoned(b, 6, 1)); });
  refused("swiglu: gate shares bytes with up", [&] { b.swiglu(x, x); });
  refused("copy_rows: copies[0].dst is 3 x 6 f32, expected 3 x 8", [&] {
    b.copy_rows(std::vector<RowCopy>{{y, x}});
  });
  refused("copy_rows: copies[0].dst shares bytes with copies[0].src", [&] {
    b.copy_rows(std::vector<RowCopy>{{x.slice(1, 2), x.slice(0, 2)}});
  });
  refused("upload: dst is not in this backend's memory",
          [&] { b.upload(elsewhere, std::vector<float>(24).data()); });
  refused("download: src (4 x 8 f32 at byte 0) runs past the end of its buffer of 96 bytes", [&] {
    std::vector<float> host(32);
    b.download(host.data(), Tensor{x.tensor().buffer, 0, 4, 8, DType::F32});
  });
  refused("weight: data is null", [&] { b.weight({nullptr, DType::F32, 2, 2}, "w"); });

  const Matrix cache = poisoned(b, 4, 8), cache_v = poisoned(b, 4, 8);
  refused("attention: heads (3) is not a multiple of kv_heads (2)", [&] {
    b.attention(poisoned(b, 1, 12), {3, 2, 4}, std::vector<AttentionSegment>{}, poisoned(b, 1, 12));
  });
  refused("attention: segments[0].k has 4 positions, fewer than start 3 + 2 rows", [&] {
    b.attention(poisoned(b, 2, 8), {2, 2, 4},
                std::vector<AttentionSegment>{{0, 2, 3, cache, cache_v}}, poisoned(b, 2, 8));
  });
  refused(
      "kv_append: segments[1] starts at row 0, before the end (2) of the segment before it", [&] {
        b.kv_append(
            poisoned(b, 3, 8), poisoned(b, 3, 8),
            std::vector<AttentionSegment>{{0, 2, 0, cache, cache_v}, {0, 1, 2, cache, cache_v}});
      });
  refused("kv_append: segments[0].k shares bytes with k", [&] {
    b.kv_append(cache.slice(0, 2), poisoned(b, 2, 8),
                std::vector<AttentionSegment>{{0, 2, 2, cache, cache_v}});
  });
  const SamplerConfig greedy;
  refused("sample: rows[0].config is null", [&] {
    int32_t token = 0;
    float logprob = 0.0f;
    b.sample(y.slice(0, 1), std::vector<SampleRequest>{{nullptr, 0, {}}}, &token, &logprob);
  });
  refused("sample: logits is 3 x 6 f32, expected 1 x 6", [&] {
    int32_t token = 0;
    float logprob = 0.0f;
    b.sample(y, std::vector<SampleRequest>{{&greedy, 0, {}}}, &token, &logprob);
  });
  refused("logprobs: targets[0] is 6, outside the 6 tokens of the vocabulary", [&] {
    float out = 0.0f;
    b.logprobs(y.slice(0, 1), std::vector<int32_t>{6}, &out);
  });
  // Nothing was computed: the outputs are as poisoned as they were.
  for (float v : get(b, y)) ASSERT_TRUE(std::isnan(v));
}

}  // namespace photon::testing
