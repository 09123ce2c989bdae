// f32 -> f16 / bf16 narrowing and the widening back, against tests/data/rounding.tsv: NumPy's
// float16 and PyTorch's bfloat16 results for a few thousand vectors (ties both ways, subnormals,
// overflow, infinities, NaN, signed zero, random values across every exponent). The table is
// written by tests/reference/rounding.py; the ctest reference_rounding_table keeps it up to date.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace photon {
namespace {

struct Row {
  uint32_t f32;
  uint16_t f16;
  uint32_t f16_widened;
  uint16_t bf16;
  uint32_t bf16_widened;
};

const std::vector<Row>& table() {
  static const std::vector<Row> rows = [] {
    const std::string path = std::string(PHOTON_SOURCE_DIR) + "/tests/data/rounding.tsv";
    std::ifstream in(path);
    EXPECT_TRUE(in) << "cannot open " << path;
    std::vector<Row> out;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      unsigned v[5];
      if (std::sscanf(line.c_str(), "%x %x %x %x %x", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5) {
        ADD_FAILURE() << path << ": bad line '" << line << "'";
        continue;
      }
      out.push_back({v[0], static_cast<uint16_t>(v[1]), v[2], static_cast<uint16_t>(v[3]), v[4]});
    }
    return out;
  }();
  return rows;
}

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint32_t to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

std::string hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

bool f16_is_nan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}

bool bf16_is_nan(uint16_t h) {
  return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0;
}

// Counts the rows where `got` differs from the table (NaN inputs: where it is not NaN) and
// reports the first few.
template <typename Got>
void expect_rows(const char* what, Got got) {
  int mismatches = 0;
  for (const Row& row : table()) {
    std::string message;
    if (!got(row, &message)) continue;
    if (++mismatches <= 10) ADD_FAILURE() << what << ": input " << hex(row.f32) << ": " << message;
  }
  EXPECT_EQ(mismatches, 0) << what << ": rows that differ from the table";
}

TEST(DTypeRounding, TableCoversTheCasesThatMatter) {
  const std::vector<Row>& rows = table();
  ASSERT_GT(rows.size(), 3000u);
  int f16_up = 0, bf16_up = 0, f16_overflow = 0, bf16_overflow = 0, f16_subnormal = 0,
      bf16_subnormal = 0, nans = 0, negative_zero = 0;
  for (const Row& row : rows) {
    const float x = from_bits(row.f32);
    if (std::isnan(x)) {
      ++nans;
      continue;
    }
    negative_zero += row.f32 == 0x80000000u;
    // Rounded away from zero: what truncation never does.
    f16_up += std::fabs(from_bits(row.f16_widened)) > std::fabs(x);
    bf16_up += std::fabs(from_bits(row.bf16_widened)) > std::fabs(x);
    f16_overflow += std::isfinite(x) && (row.f16 & 0x7fffu) == 0x7c00u;
    bf16_overflow += std::isfinite(x) && (row.bf16 & 0x7fffu) == 0x7f80u;
    f16_subnormal += (row.f16 & 0x7c00u) == 0 && (row.f16 & 0x03ffu) != 0;
    bf16_subnormal += (row.bf16 & 0x7f80u) == 0 && (row.bf16 & 0x007fu) != 0;
  }
  EXPECT_GE(f16_up, 500);
  EXPECT_GE(bf16_up, 500);
  EXPECT_GE(f16_overflow, 10);
  EXPECT_GE(bf16_overflow, 10);
  EXPECT_GE(f16_subnormal, 100);
  EXPECT_GE(bf16_subnormal, 100);
  EXPECT_GE(nans, 5);
  EXPECT_EQ(negative_zero, 1);
}

TEST(DTypeRounding, F32ToF16MatchesNumPy) {
  expect_rows("f32_to_f16", [](const Row& row, std::string* message) {
    const uint16_t got = f32_to_f16(from_bits(row.f32));
    const bool ok = std::isnan(from_bits(row.f32)) ? f16_is_nan(got) : got == row.f16;
    if (!ok) *message = "got " + hex(got) + ", NumPy " + hex(row.f16);
    return !ok;
  });
}

TEST(DTypeRounding, F32ToBf16MatchesPyTorch) {
  expect_rows("f32_to_bf16", [](const Row& row, std::string* message) {
    const uint16_t got = f32_to_bf16(from_bits(row.f32));
    const bool ok = std::isnan(from_bits(row.f32)) ? bf16_is_nan(got) : got == row.bf16;
    if (!ok) *message = "got " + hex(got) + ", PyTorch " + hex(row.bf16);
    return !ok;
  });
}

TEST(DTypeRounding, WideningMatchesNumPyAndPyTorch) {
  expect_rows("f16_to_f32 and bf16_to_f32", [](const Row& row, std::string* message) {
    const float f16 = f16_to_f32(row.f16), bf16 = bf16_to_f32(row.bf16);
    const bool ok = (std::isnan(f16) ? std::isnan(from_bits(row.f16_widened))
                                     : to_bits(f16) == row.f16_widened) &&
                    (std::isnan(bf16) ? std::isnan(from_bits(row.bf16_widened))
                                      : to_bits(bf16) == row.bf16_widened);
    if (!ok)
      *message = "f16 " + hex(row.f16) + " -> " + hex(to_bits(f16)) + " (NumPy " +
                 hex(row.f16_widened) + "), bf16 " + hex(row.bf16) + " -> " + hex(to_bits(bf16)) +
                 " (PyTorch " + hex(row.bf16_widened) + ")";
    return !ok;
  });
}

// Every one of the 65,536 halves widens to the value its fields define (IEEE 754 binary16:
// (-1)^s 2^(e-15) 1.m, subnormals 2^-14 0.m, e = 31 infinities and NaNs), in the scalar and the
// array conversion.
TEST(DTypeRounding, EveryHalfWidensToItsValue) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < all.size(); ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> wide(all.size());
  convert_to_f32(DType::F16, all.data(), wide.data(), all.size());
  for (uint32_t h = 0; h < all.size(); ++h) {
    const uint32_t sign = h >> 15, exp = (h >> 10) & 31u, mant = h & 1023u;
    double want = exp == 0 ? std::ldexp(static_cast<double>(mant), -24)
                  : exp == 31
                      ? (mant ? NAN : INFINITY)
                      : std::ldexp(static_cast<double>(mant + 1024), static_cast<int>(exp) - 25);
    if (sign) want = -want;
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got) && std::isnan(wide[h])) << hex(h);
    } else {
      ASSERT_EQ(got, static_cast<float>(want)) << hex(h);
      ASSERT_EQ(std::signbit(got), sign == 1) << hex(h);
      ASSERT_EQ(to_bits(wide[h]), to_bits(got)) << hex(h);
    }
  }
}

// The array conversions the model writer and loader use agree with the table too.
TEST(DTypeRounding, ArrayConversionsMatchTheTable) {
  const std::vector<Row>& rows = table();
  std::vector<float> input;
  for (const Row& row : rows) input.push_back(from_bits(row.f32));
  for (DType dtype : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<uint16_t> narrow(rows.size());
    convert_from_f32(dtype, input.data(), narrow.data(), input.size());
    std::vector<float> wide(rows.size());
    convert_to_f32(dtype, narrow.data(), wide.data(), wide.size());
    int mismatches = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const bool f16 = dtype == DType::F16;
      const uint32_t want = f16 ? rows[i].f16_widened : rows[i].bf16_widened;
      const bool ok = std::isnan(input[i]) ? std::isnan(wide[i]) : to_bits(wide[i]) == want;
      if (!ok && ++mismatches <= 10)
        ADD_FAILURE() << "input " << hex(rows[i].f32) << ": got " << hex(to_bits(wide[i]))
                      << ", want " << hex(want);
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// q8 by its definition (core/dtype.h), per block of 32: the bf16 scale d of max |w| / 127 (its
// rounding is checked against PyTorch above), q = w / d rounded to nearest even and clamped, and
// the values d q.
TEST(DTypeQ8, BlocksHoldTheirScaleAndRoundedValues) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(32 * 6, 0.0f);  // block 1 stays all zero
  for (int i = 0; i < 32; ++i) {
    w[i] = u(rng);                     // block 0: values below one
    w[64 + i] = 1e-39f * u(rng);       // block 2: subnormals
    w[96 + i] = 3e37f * u(rng);        // block 3: near the top of f32's range
    w[160 + i] = (i % 16 - 8) + 0.5f;  // block 5: ties, with d = 1 (below)
  }
  w[128] = -2.5f;  // block 4: one value, the rest zero
  w[191] = 127.0f;
  std::vector<uint8_t> blocks(6 * 34);
  convert_from_f32(DType::Q8, w.data(), blocks.data(), w.size());
  std::vector<float> values(w.size());
  convert_to_f32(DType::Q8, blocks.data(), values.data(), values.size());
  for (int b = 0; b < 6; ++b) {
    float largest = 0.0f;
    for (int i = 0; i < 32; ++i) largest = std::max(largest, std::fabs(w[32 * b + i]));
    uint16_t scale = 0;
    std::memcpy(&scale, &blocks[34 * b], 2);
    ASSERT_EQ(scale, f32_to_bf16(largest / 127.0f)) << "block " << b;
    const float d = bf16_to_f32(scale);
    for (int i = 0; i < 32; ++i) {
      const float q =
          d == 0.0f ? 0.0f : std::clamp(std::nearbyint(w[32 * b + i] / d), -127.0f, 127.0f);
      const int8_t stored = static_cast<int8_t>(blocks[34 * b + 2 + i]);
      ASSERT_EQ(stored, static_cast<int8_t>(q)) << "block " << b << " value " << i;
      ASSERT_EQ(values[32 * b + i], d * q) << "block " << b << " value " << i;
      if (d > 0.0f) {
        ASSERT_LE(std::fabs(values[32 * b + i] - w[32 * b + i]), 0.51f * d);
      }
    }
  }
  // The ties of block 5 (d = 127 / 127 = 1) go to the even neighbour.
  const int8_t ties[] = {-8, -6, -6, -4, -4, -2, -2, 0, 0, 2, 2, 4, 4, 6, 6, 8};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(static_cast<int8_t>(blocks[34 * 5 + 2 + i]), ties[i]);
  EXPECT_EQ(static_cast<int8_t>(blocks[34 * 4 + 2]), -127);
}

}  // namespace
}  // namespace photon
