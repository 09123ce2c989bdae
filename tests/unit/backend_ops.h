// The per-op test of backends (test_backend_ops.cpp), in the manner of ggml's test-backend-ops:
// every op of the Backend interface over a table of shapes, weight types and KV cache types, on
// each backend under test, held through the interface, against the CPU backend with portable
// kernels as the oracle, which is itself checked against double-precision references written in
// the test. A test binary instantiates it for the backends it is about (tests/unit: the CPU's
// kernel sets; tests/gpu: the CUDA backend); another backend needs only its entries here.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace photon::testing {

// The calls of the Backend interface, as the tables name them.
enum class Op {
  Weight,
  Transfer,  // allocate, upload, download
  CopyRows,
  Embed,
  Rmsnorm,
  Linear,
  LinearGroup,
  RopeTable,
  Rope,
  Swiglu,
  KvAppend,
  Attention,
  Sample,
  Logprobs,
};

// How close a result must come to the one it is compared with.
struct Tolerance {
  enum class Kind {
    Bits,      // the same bits
    Rounding,  // within the f32 rounding of a product: per element, 1e-6 (4 + in / 64) times the
               // sum of the magnitudes of its terms (twice that between two f32 computations)
    Relative,  // ||got - want|| / ||want|| <= bound, every value finite where want's is
    Absolute,  // |got - want| <= bound per element
    Bf16,      // exactly want rounded to bf16 (nearest even): weights a backend stores in bf16
  };
  Kind kind = Kind::Bits;
  double bound = 0.0;
};

// One backend to test. make() throws photon::Error with status `skip_status` where the machine
// lacks it (the test then skips, giving the message); any other failure fails the test.
struct BackendUnderTest {
  std::string label{};  // the test's name suffix: letters, digits, underscores
  std::function<std::unique_ptr<Backend>()> make{};
  photon_status skip_status = PHOTON_ERR_UNSUPPORTED;
  std::string skip_prefix{};  // put before the message of a skip
  // The oracle itself: checked against the double-precision references instead.
  bool oracle = false;
  // How its products compute; the oracle computes the same way.
  Precision precision = Precision::Exact;
  // The storage types of weight matrices that it computes (another is refused at weight()).
  std::vector<DType> weight_types{DType::F32, DType::BF16, DType::F16, DType::Q8};
  // How close to the oracle each op comes, for weights (or caches) of `dtype` and `rows` rows.
  std::function<Tolerance(Op op, DType dtype, int64_t rows)> tolerance{};
  // Another backend that the results must match as twin_tolerance says (AVX-512 and AVX2).
  std::string twin_label{};
  std::function<std::unique_ptr<Backend>()> twin{};
  std::function<Tolerance(Op op, DType dtype, int64_t rows)> twin_tolerance{};
};

class BackendOps : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  void SetUp() override;
  Backend& backend() { return *backend_; }

  // Runs `run` on the backend under test and compares what it gives: the oracle's result with
  // `reference` (double precision) within reference_tolerance; any other backend's with the
  // oracle's run of the same inputs within its entry's tolerance for (op, dtype, rows), and with
  // its twin's. bounds: per element, for Tolerance::Kind::Rounding; `fixed` replaces every
  // tolerance.
  void verify(const std::string& what, Op op, DType dtype, int64_t rows,
              const std::function<std::vector<float>(Backend&)>& run,
              const std::vector<double>& reference, const Tolerance& reference_tolerance,
              const std::vector<double>& bounds = {}, const Tolerance* fixed = nullptr);

  std::unique_ptr<Backend> backend_, oracle_, twin_;
};

// The test's name for an entry.
inline std::string backend_label(const ::testing::TestParamInfo<BackendUnderTest>& info) {
  return info.param.label;
}

}  // namespace photon::testing
