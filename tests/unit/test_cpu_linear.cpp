// The CPU backend's linear layer against a double-precision product of the same operands: the
// skinny kernels (portable, AVX2, AVX-512) at every row count, f32 / bf16 / f16 weights, bias,
// accumulation; and the promises of skinny_gemm.h: a row's result does not depend on the rows
// beside it, the output range or the thread count, with every kernel set; the vector sets give the
// same bits and the portable set agrees with them to within f32 rounding; a group of products
// gives each one's bits; the int8 kernels give the same bits on every set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/skinny_gemm.h"
#include "core/dtype.h"

namespace photon::cpu {
namespace {

struct Shape {
  int n, in, out;
};

// Weights stored in `dtype` and the f32 values they stand for.
struct Weights {
  DType dtype;
  std::vector<uint16_t> narrow;  // bf16 / f16 storage, or q8 blocks (fewer bytes)
  std::vector<float> wide;       // the exact values

  Weights(DType d, const std::vector<float>& values) : dtype(d), wide(values) {
    if (dtype == DType::F32) return;
    narrow.resize(values.size());
    convert_from_f32(dtype, values.data(), narrow.data(), values.size());
    convert_to_f32(dtype, narrow.data(), wide.data(), values.size());
  }
  const void* data() const {
    return dtype == DType::F32 ? static_cast<const void*>(wide.data()) : narrow.data();
  }
  WeightMatrix matrix(const Shape& s) const { return {data(), dtype, s.out, s.in}; }
};

// The kernel set a model gets on this processor.
const SkinnyKernels& widest() {
  return kernel_functions(default_cpu_kernels());
}

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// y0 + x W^T + bias in double, and the bound of each element's f32 rounding: sum |x w| times a
// few units of f32 precision per term of the longest partial sum.
void reference(const Shape& s, const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>* bias, const std::vector<float>& y0, bool accumulate,
               std::vector<double>* want, std::vector<double>* bound) {
  want->assign(static_cast<size_t>(s.n) * s.out, 0.0);
  bound->assign(want->size(), 0.0);
  for (int r = 0; r < s.n; ++r) {
    for (int o = 0; o < s.out; ++o) {
      double sum = 0, magnitude = 0;
      for (int k = 0; k < s.in; ++k) {
        const double p = static_cast<double>(x[size_t(r) * s.in + k]) * w[size_t(o) * s.in + k];
        sum += p;
        magnitude += std::fabs(p);
      }
      const size_t i = size_t(r) * s.out + o;
      const double before = accumulate ? y0[i] : 0.0, after = bias ? (*bias)[o] : 0.0;
      (*want)[i] = before + sum + after;
      (*bound)[i] = (magnitude + std::fabs(before) + std::fabs(after)) * 1e-6 * (4 + s.in / 64.0);
    }
  }
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], bound[i]) << what << " element " << i;
}

// {53, 2100, 70}: AVX-512's blocked loops with two blocks of columns and a tail, two blocks of
// outputs (the second with a tail) and five rows past the last whole tile.
const Shape kSkinnyShapes[] = {{1, 64, 1},    {1, 1664, 35}, {2, 52, 7},
                               {3, 96, 50},   {7, 33, 19},   {32, 256, 48},
                               {70, 416, 50}, {129, 52, 33}, {53, 2100, 70}};
// Many rows: every kernel set's blocked loops, with and without rows past the last whole tile.
const Shape kManyRowShapes[] = {{257, 64, 40}, {300, 416, 200}, {513, 52, 33}, {4100, 24, 9}};
const DType kDTypes[] = {DType::F32, DType::BF16, DType::F16, DType::Q8};

SkinnyKernel kernel_of(const SkinnyKernels& k, DType dtype) {
  switch (dtype) {
    case DType::F32: return k.f32;
    case DType::BF16: return k.bf16;
    case DType::F16: return k.f16;
    case DType::Q8: return k.q8;
  }
  return nullptr;
}

// The columns a test of `in` columns uses with weights of `dtype`: q8 rows are whole blocks of
// 32, so its widths are rounded up to one.
int columns(DType dtype, int in) {
  return dtype == DType::Q8 ? (in + kQ8Block - 1) / kQ8Block * kQ8Block : in;
}
std::vector<int> columns(DType dtype, std::initializer_list<int> widths) {
  std::vector<int> out;
  for (int in : widths) out.push_back(columns(dtype, in));
  return out;
}
template <class Shapes>
std::vector<Shape> columns(DType dtype, const Shapes& shapes) {
  std::vector<Shape> out;
  for (const Shape& s : shapes) out.push_back({s.n, columns(dtype, s.in), s.out});
  return out;
}

// One kernel flavour against the double-precision product.
void check_skinny(const SkinnyKernels& kernels, const char* name) {
  for (DType dtype : kDTypes) {
    for (const Shape& s : columns(dtype, kSkinnyShapes)) {
      const std::string what = std::string(name) + " " + dtype_name(dtype) + " n " +
                               std::to_string(s.n) + " in " + std::to_string(s.in) + " out " +
                               std::to_string(s.out);
      const Weights w(dtype, random_values(size_t(s.out) * s.in, 1 + s.in, 0.1f));
      const std::vector<float> x = random_values(size_t(s.n) * s.in, 2 + s.out);
      for (bool accumulate : {false, true}) {
        std::vector<float> y = random_values(size_t(s.n) * s.out, 3);
        const std::vector<float> y0 = y;
        kernel_of(kernels,
                  dtype)({x.data(), s.n, s.in, w.data(), 0, s.out, y.data(), s.out, accumulate});
        std::vector<double> want, bound;
        reference(s, x, w.wide, nullptr, y0, accumulate, &want, &bound);
        expect_close(y, want, bound, what + (accumulate ? " accumulate" : ""));
      }
    }
  }
}

TEST(CpuLinear, PortableSkinnyKernelsMatchDoubleProduct) {
  check_skinny(kSkinnyPortable, "portable");
}

#if defined(PHOTON_X86_KERNELS)
TEST(CpuLinear, Avx2SkinnyKernelsMatchDoubleProduct) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 + FMA + F16C";
  check_skinny(kSkinnyAvx2, "avx2");
}

TEST(CpuLinear, Avx512SkinnyKernelsMatchDoubleProduct) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512F";
  check_skinny(kSkinnyAvx512, "avx512");
}

// skinny_gemm.h's fixed order makes the two vector sets give the same bits, so that results do
// not depend on which x86-64 machine computed them: every row count up to 40 (each tail of both
// tile shapes) and some up to 600 (the AVX-512 set's blocked loops from 48), columns with
// and without a tail (2,100: two blocks of columns, and two blocks of 70 outputs), every weight
// type.
TEST(CpuLinear, Avx512GivesTheBitsOfAvx2) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512F";
  for (DType dtype : kDTypes) {
    for (int in : columns(dtype, {16, 77, 300, 2100})) {
      std::vector<int> rows;
      for (int n = 1; n <= 40; ++n) rows.push_back(n);
      for (int n : {47, 48, 53, 63, 64, 65, 127, 200, 256, 600}) rows.push_back(n);
      for (int n : rows) {
        const int out = in > 1024 ? 70 : 21;
        const Weights w(dtype, random_values(size_t(out) * in, 13 + in, 0.1f));
        const std::vector<float> x = random_values(size_t(n) * in, 14 + n);
        std::vector<float> a(size_t(n) * out), b(a.size());
        kernel_of(kSkinnyAvx2, dtype)({x.data(), n, in, w.data(), 0, out, a.data(), out, false});
        kernel_of(kSkinnyAvx512, dtype)({x.data(), n, in, w.data(), 0, out, b.data(), out, false});
        ASSERT_EQ(a, b) << dtype_name(dtype) << " n " << n << " in " << in;
      }
    }
  }
}

// The q8_int8 kernels (int8 precision) give the portable kernel's bits on every vector set (the
// AVX-512 set's is the VNNI kernel where the processor has it): every tail of the 4 x 2 and 4 x 4
// tiles, one and many blocks, output ranges that start and end inside a tile, accumulation, and
// the extreme integers (weights -128 and 127, activations -127 and 127), whose products the
// kernels must add without saturating.
TEST(CpuLinear, Int8KernelsGiveThePortableBits) {
  std::mt19937 gen(31);
  std::uniform_int_distribution<int> weight(-128, 127), act(-127, 127), extreme(0, 7);
  std::uniform_real_distribution<float> scale(1e-3f, 1e-1f);
  for (const SkinnyKernels* set : {&kSkinnyAvx2, &kSkinnyAvx512}) {
    if (set == &kSkinnyAvx2 ? !cpu_has_avx2() : !cpu_has_avx512()) continue;
    const char* name = set == &kSkinnyAvx2     ? "avx2"
                       : cpu_has_avx512_vnni() ? "avx512 vnni"
                                               : "avx512";
    for (int in : {32, 96, 2080}) {
      const int out = 21, blocks = in / kQ8Block;
      std::vector<Q8Block> w(size_t(out) * blocks);
      for (Q8Block& b : w) {
        const float d = scale(gen);
        convert_from_f32(DType::BF16, &d, &b.scale, 1);
        for (int8_t& q : b.q)
          q = static_cast<int8_t>(extreme(gen) == 0 ? (gen() % 2 ? 127 : -128) : weight(gen));
      }
      for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 16, 17, 33, 47, 64, 65, 200}) {
        std::vector<int8_t> xq(size_t(n) * in);
        for (int8_t& q : xq)
          q = static_cast<int8_t>(extreme(gen) == 0 ? (gen() % 2 ? 127 : -127) : act(gen));
        std::vector<float> xd(size_t(n) * blocks);
        for (float& d : xd) d = scale(gen);
        for (const auto& [o0, o1] : {std::pair{0, out}, std::pair{3, 18}}) {
          for (bool accumulate : {false, true}) {
            std::vector<float> a = random_values(size_t(n) * out, 5), b = a;
            SkinnyArgs args{nullptr, n, in, w.data(), o0, o1, a.data(), out, accumulate};
            args.xq = xq.data();
            args.xd = xd.data();
            kSkinnyPortable.q8_int8(args);
            args.y = b.data();
            set->q8_int8(args);
            ASSERT_EQ(a, b) << name << " n " << n << " in " << in << " outputs " << o0 << ".." << o1
                            << (accumulate ? " accumulate" : "");
          }
        }
      }
    }
  }
}
#endif

// The AVX512-BF16 kernel (bf16 weights at bf16 precision) has an order of its own: each row gives
// the float64 product of its bf16 values within f32 rounding, and the bits of the row alone
// whatever the rows beside it (every tail of the 6 x 4 tiles, the blocked loops from 48), with
// columns in whole groups of 32, with a pair or more past them, and too few for one group; an odd
// width takes the bf16 kernel, as exact precision computes the rounded input.
TEST(CpuLinear, Bf16DotRowsDoNotDependOnTheirNeighbours) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::vector<int> counts;
  for (int n = 1; n <= 70; ++n) counts.push_back(n);
  for (int n : {100, 257, 600}) counts.push_back(n);
  const int most = counts.back(), out = 71;
  for (int in : {8, 64, 1100, 2102, 77}) {
    const Weights w(DType::BF16, random_values(size_t(out) * in, 41 + in, 0.1f));
    std::vector<float> x = random_values(size_t(most) * in, 42 + in);
    std::vector<Bf16> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xb[i].bits = f32_to_bf16(x[i]);
      x[i] = bf16_to_f32(xb[i].bits);
    }
    auto product = [&](int n, const float* rows, const Bf16* packed, float* y) {
      SkinnyArgs a{rows, n, in, w.data(), 0, out, y, out, false};
      a.xb = packed;
      // The kernel set's choice where it takes the dot product (or the width is odd), else the
      // kernel itself: a processor with a slow one still runs it right.
      if (cpu_has_fast_bf16_dot() || in % 2)
        kSkinnyAvx512.bf16_dot(a);
      else
        skinny_bf16_dot_avx512bf16(a);
    };
    std::vector<float> alone(size_t(most) * out);
    for (int r = 0; r < most; ++r)
      product(1, x.data() + size_t(r) * in, xb.data() + size_t(r) * in,
              alone.data() + size_t(r) * out);
    std::vector<double> want, bound;
    reference({most, in, out}, x, w.wide, nullptr, alone, false, &want, &bound);
    expect_close(alone, want, bound, "in " + std::to_string(in));
    std::vector<float> exact(alone.size());
    kSkinnyAvx512.bf16({x.data(), most, in, w.data(), 0, out, exact.data(), out, false});
    if (in % 2) {
      EXPECT_EQ(alone, exact) << "an odd width takes the bf16 kernel";
    } else if (in >= 32) {
      EXPECT_NE(alone, exact) << "the dot products ran in the f32 kernels' order";
    }
    for (int n : counts) {
      std::vector<float> together(size_t(n) * out);
      product(n, x.data(), xb.data(), together.data());
      for (int r = 0; r < n; ++r) {
        const auto row = together.begin() + size_t(r) * out;
        ASSERT_TRUE(std::equal(row, row + out, alone.begin() + size_t(r) * out))
            << "in " << in << ": row " << r << " of " << n << " differs from the row alone";
      }
    }
  }
}

// A kernel set by name; null, with the reason, where this build or this CPU cannot run it.
const SkinnyKernels* kernel_set(const std::string& name, std::string* missing) {
  if (name == "portable") return &kSkinnyPortable;
#if defined(PHOTON_X86_KERNELS)
  if (name == "avx2") {
    if (cpu_has_avx2()) return &kSkinnyAvx2;
    *missing = "this CPU has no AVX2 + FMA + F16C";
    return nullptr;
  }
  if (cpu_has_avx512()) return &kSkinnyAvx512;
  *missing = "this CPU has no AVX-512F";
#else
  *missing = "the " + name + " kernels are built on x86-64 only";
#endif
  return nullptr;
}

// Each kernel set in turn, whichever linear() would choose: skipped, saying why, where it
// cannot run.
class CpuLinearKernelSet : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string missing;
    kernels_ = kernel_set(GetParam(), &missing);
    if (!kernels_) GTEST_SKIP() << missing;
  }
  const SkinnyKernels* kernels_ = nullptr;
};

// What batching rests on (batched prefill, generate_batch, requests joining a running batch): row
// r of an n-row product has the bits of row r computed alone, for every n across the kernels'
// thresholds (each tail of the 3- and 6-row tiles, the AVX-512 set's hand-over to the AVX2 tiles
// below 16 rows, the blocked loops from 48, a prompt pass of 512 and more), every weight type,
// 1,100 columns (a block of 1,024 and a tail past the last 16) and 71 outputs (a block of 64, then
// groups and one output alone).
TEST_P(CpuLinearKernelSet, EachRowGivesTheBitsOfTheRowAlone) {
  const int out = 71;
  std::vector<int> counts;
  for (int n = 1; n <= 70; ++n) counts.push_back(n);
  for (int n : {100, 257, 600, 4100}) counts.push_back(n);
  const int most = counts.back();
  for (DType dtype : kDTypes) {
    const int in = columns(dtype, 1100);
    const std::vector<float> x = random_values(size_t(most) * in, 21);
    const Weights w(dtype, random_values(size_t(out) * in, 22, 0.1f));
    const SkinnyKernel kernel = kernel_of(*kernels_, dtype);
    std::vector<float> alone(size_t(most) * out);
    for (int r = 0; r < most; ++r)
      kernel({x.data() + size_t(r) * in, 1, in, w.data(), 0, out, alone.data() + size_t(r) * out,
              out, false});
    for (int n : counts) {
      std::vector<float> together(size_t(n) * out);
      kernel({x.data(), n, in, w.data(), 0, out, together.data(), out, false});
      for (int r = 0; r < n; ++r) {
        const auto row = together.begin() + size_t(r) * out;
        ASSERT_TRUE(std::equal(row, row + out, alone.begin() + size_t(r) * out))
            << GetParam() << " " << dtype_name(dtype) << ": row " << r << " of " << n
            << " differs from the row alone";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sets, CpuLinearKernelSet, testing::Values("portable", "avx2", "avx512"),
                         [](const testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

// The same through linear() on 2 threads, with the kernel set a model gets ($PHOTON_CPU_KERNELS
// caps it): its work items, the outputs' split over the threads and the choice of loops by row
// count must not change a row's bits either.
TEST(CpuLinear, LinearGivesEachRowTheBitsOfTheRowAlone) {
  std::vector<int> counts;
  for (int n = 1; n <= 70; ++n) counts.push_back(n);
  for (int n : {100, 257, 600, 4100}) counts.push_back(n);
  const std::vector<float> bias = random_values(71, 26);
  for (DType dtype : kDTypes) {
    const Shape s{4100, columns(dtype, 1100), 71};
    const std::vector<float> x = random_values(size_t(s.n) * s.in, 25);
    const Weights w(dtype, random_values(size_t(s.out) * s.in, 27, 0.1f));
    std::vector<float> alone(size_t(s.n) * s.out);
    for (int r = 0; r < s.n; ++r)
      linear({x.data() + size_t(r) * s.in}, 1, w.matrix(s), bias.data(),
             alone.data() + size_t(r) * s.out, false, widest(), 2);
    for (int n : counts) {
      std::vector<float> together(size_t(n) * s.out);
      linear({x.data()}, n, w.matrix(s), bias.data(), together.data(), false, widest(), 2);
      for (int r = 0; r < n; ++r) {
        const auto row = together.begin() + size_t(r) * s.out;
        ASSERT_TRUE(std::equal(row, row + s.out, alone.begin() + size_t(r) * s.out))
            << dtype_name(dtype) << ": row " << r << " of " << n << " differs from the row alone";
      }
    }
  }
}

#if defined(PHOTON_X86_KERNELS)
// skinny_gemm.h: the vector kernels fuse each multiply-add and the portable ones need not, so the
// two agree to within f32 rounding. Each is within gamma_m = m u / (1 - m u) (u = 2^-24) of
// sum_k |x_k w_k| of the exact sum, m the roundings on an output's longest path (a partial sum's
// in / 16 additions, the tree's 4, the tail's in % 16, and the product's own where it is not
// fused), so the two within twice that of each other.
TEST(CpuLinear, Avx2AndPortableAgreeWithinF32Rounding) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 + FMA + F16C";
  for (DType dtype : kDTypes) {
    for (int in : columns(dtype, {16, 77, 300, 1100})) {
      for (int n : {1, 2, 4, 7, 47, 48, 53, 257}) {
        const int out = 21;
        const Weights w(dtype, random_values(size_t(out) * in, 23 + in, 0.1f));
        const std::vector<float> x = random_values(size_t(n) * in, 24 + n);
        std::vector<float> avx2(size_t(n) * out), portable(avx2.size());
        kernel_of(kSkinnyAvx2, dtype)({x.data(), n, in, w.data(), 0, out, avx2.data(), out, false});
        kernel_of(kSkinnyPortable,
                  dtype)({x.data(), n, in, w.data(), 0, out, portable.data(), out, false});
        const double m = in / 16 + 4 + in % 16 + 1, u = std::ldexp(1.0, -24);
        const double gamma = m * u / (1 - m * u);
        for (int r = 0; r < n; ++r) {
          for (int o = 0; o < out; ++o) {
            double magnitude = 0;
            for (int k = 0; k < in; ++k)
              magnitude += std::fabs(double(x[size_t(r) * in + k]) * w.wide[size_t(o) * in + k]);
            const size_t i = size_t(r) * out + o;
            ASSERT_LE(std::fabs(double(avx2[i]) - portable[i]), 2 * gamma * magnitude)
                << dtype_name(dtype) << " n " << n << " in " << in << " row " << r << " output "
                << o;
          }
        }
      }
    }
  }
}
#endif

TEST(CpuLinear, AllPathsMatchDoubleProductWithBiasAndThreads) {
  std::vector<Shape> shapes(std::begin(kSkinnyShapes), std::end(kSkinnyShapes));
  shapes.insert(shapes.end(), std::begin(kManyRowShapes), std::end(kManyRowShapes));
  for (DType dtype : kDTypes) {
    for (const Shape& s : columns(dtype, shapes)) {
      const Weights w(dtype, random_values(size_t(s.out) * s.in, 5 + s.in, 0.1f));
      const std::vector<float> x = random_values(size_t(s.n) * s.in, 6 + s.out);
      const std::vector<float> bias = random_values(s.out, 7);
      const std::vector<float> y0 = random_values(size_t(s.n) * s.out, 8);
      for (bool accumulate : {false, true}) {
        const std::string what = std::string(dtype_name(dtype)) + " n " + std::to_string(s.n) +
                                 " in " + std::to_string(s.in) + " out " + std::to_string(s.out) +
                                 (accumulate ? " accumulate" : "");
        std::vector<double> want, bound;
        reference(s, x, w.wide, &bias, y0, accumulate, &want, &bound);
        std::vector<float> one = y0, two = y0;
        linear({x.data()}, s.n, w.matrix(s), bias.data(), one.data(), accumulate, widest(), 1);
        linear({x.data()}, s.n, w.matrix(s), bias.data(), two.data(), accumulate, widest(), 2);
        expect_close(one, want, bound, what);
        EXPECT_EQ(one, two) << what << ": 1 and 2 threads differ";
      }
    }
  }
}

TEST(CpuLinear, StoredWeightsGiveTheBitsOfTheirF32Values) {
  // Widening is exact (q8's d * q too), so a bf16, f16 or q8 matrix and the f32 matrix of its
  // values are the same operands: every path must give the same bits for both.
  std::vector<Shape> shapes(std::begin(kSkinnyShapes), std::end(kSkinnyShapes));
  shapes.insert(shapes.end(), std::begin(kManyRowShapes), std::end(kManyRowShapes));
  for (DType dtype : {DType::BF16, DType::F16, DType::Q8}) {
    for (const Shape& s : columns(dtype, shapes)) {
      const Weights narrow(dtype, random_values(size_t(s.out) * s.in, 9, 0.1f));
      const Weights wide(DType::F32, narrow.wide);
      const std::vector<float> x = random_values(size_t(s.n) * s.in, 10);
      std::vector<float> a(size_t(s.n) * s.out), b(a.size());
      linear({x.data()}, s.n, narrow.matrix(s), nullptr, a.data(), false, widest(), 2);
      linear({x.data()}, s.n, wide.matrix(s), nullptr, b.data(), false, widest(), 2);
      EXPECT_EQ(a, b) << dtype_name(dtype) << " n " << s.n << " in " << s.in << " out " << s.out;
    }
  }
}

TEST(CpuLinear, GroupGivesTheBitsOfEachProductAlone) {
  // Q, K, V-like products of one input (outputs of different counts, one accumulating), at 1 and
  // 20 rows and, in the blocked loops, 300.
  for (DType dtype : kDTypes) {
    const int in = columns(dtype, 200);
    for (int n : {1, 20, 300}) {
      const std::vector<float> x = random_values(size_t(n) * in, 13);
      std::vector<Weights> weights;
      std::vector<Shape> shapes;
      for (int out : {96, 40, 173}) {
        shapes.push_back({n, in, out});
        weights.emplace_back(dtype, random_values(size_t(out) * in, 14 + out, 0.1f));
      }
      std::vector<std::vector<float>> grouped, alone;
      for (size_t i = 0; i < shapes.size(); ++i) {
        grouped.push_back(random_values(size_t(n) * shapes[i].out, 15));
        alone.push_back(grouped.back());
      }
      std::vector<Product> products;
      for (size_t i = 0; i < shapes.size(); ++i) {
        const bool accumulate = i == 1;
        products.push_back({weights[i].matrix(shapes[i]), grouped[i].data(), accumulate});
        linear({x.data()}, n, weights[i].matrix(shapes[i]), nullptr, alone[i].data(), accumulate,
               widest(), 2);
      }
      linear_group({x.data()}, n, products, widest(), 2);
      for (size_t i = 0; i < shapes.size(); ++i)
        EXPECT_EQ(grouped[i], alone[i])
            << dtype_name(dtype) << " n " << n << " product " << i << " of a group";
    }
  }
}

TEST(CpuLinear, SkinnyRowsDoNotDependOnTheirNeighboursOrOutputRange) {
  for (DType dtype : kDTypes) {
    const Shape s{600, columns(dtype, 1100), 70};
    const Weights w(dtype, random_values(size_t(s.out) * s.in, 11, 0.1f));
    const std::vector<float> x = random_values(size_t(s.n) * s.in, 12);
    std::vector<float> all(size_t(s.n) * s.out);
    linear({x.data()}, s.n, w.matrix(s), nullptr, all.data(), false, widest(), 1);
    for (int r = 0; r < s.n; ++r) {
      // Row r alone, its outputs computed in two ranges by the kernel directly.
      std::vector<float> alone(s.out);
      const SkinnyKernels& k = widest();
      const float* xr = x.data() + size_t(r) * s.in;
      kernel_of(k, dtype)({xr, 1, s.in, w.data(), 0, 5, alone.data(), s.out, false});
      kernel_of(k, dtype)({xr, 1, s.in, w.data(), 5, s.out, alone.data(), s.out, false});
      const std::vector<float> in_batch(all.begin() + size_t(r) * s.out,
                                        all.begin() + size_t(r + 1) * s.out);
      ASSERT_EQ(alone, in_batch) << dtype_name(dtype) << " row " << r;
    }
  }
}

}  // namespace
}  // namespace photon::cpu
