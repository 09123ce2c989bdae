#include "backend/cuda/linear.h"

#include <algorithm>
#include <string>

#include "backend/cuda/round_activations.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/split_activations.h"

namespace photon::cuda {

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::Q8: q8_unsupported("cublasLt matmul");
  }
  return CUDA_R_32F;
}

const char* type_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8: return "q8";
  }
  return "?";
}

struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};

template <class T>
void set_op(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  PHOTON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof value));
}

template <class T>
void set_preference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attribute,
                    const T& value) {
  PHOTON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof value));
}

}  // namespace

Gemm::Gemm(size_t workspace_bytes, Precision precision)
    : precision_(precision), workspace_(workspace_bytes, "cuBLASLt workspace") {
  PHOTON_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Gemm::~Gemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

Gemm::Plan& Gemm::plan_for(const PlanKey& key) {
  if (auto found = plans_.find(key); found != plans_.end()) return *found->second;
  const std::string problem = "y[" + std::to_string(key.n) + ", " + std::to_string(key.out) +
                              "] = x W^T with " + type_name(key.dtype) + " weights [" +
                              std::to_string(key.out) + ", " + std::to_string(key.in) + "]";
  auto plan = std::make_unique<Plan>();
  PHOTON_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_op(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_op(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (key.bias) {
    set_op(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_op(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
  }
  // cuBLASLt is column-major: W [out, in] row-major is a column-major [in, out] used transposed,
  // x [n, in] is [in, n], y [n, out] is [out, n].
  const cudaDataType_t operands = cuda_type(key.dtype);
  PHOTON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, operands, key.in, key.out, key.in));
  PHOTON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, operands, key.in, key.n, key.in));
  PHOTON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, key.out, key.n, key.out));

  cublasLtMatmulPreference_t raw_pref = nullptr;
  PHOTON_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter> pref(raw_pref);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                 static_cast<uint64_t>(workspace_.bytes()));
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check_cublas(cublasLtMatmulAlgoGetHeuristic(handle_, plan->op, plan->a, plan->b, plan->c, plan->c,
                                              raw_pref, 1, &result, &found),
               "cublasLtMatmulAlgoGetHeuristic for " + problem);
  if (found == 0) fail(PHOTON_ERR_DEVICE, "cuBLASLt has no algorithm for " + problem);
  plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

namespace {

// From this many rows a product with 16-bit weights is bound by the tensor cores, not by reading
// the weights (n rows make n flops per byte of weights; an H100 or H200 does about 200 bf16 flops
// in the time it reads a byte), so the two terms take two GEMMs into y, the second accumulating,
// instead of one GEMM over the stacked rows: the same arithmetic without writing and reading back
// 2 x rows x out partial sums (the stacked LM head ran 3.3x a plain bf16 one at 2,048 rows;
// docs/performance.md, "Two-term activations"). Below it the stacked GEMM reads the weights once
// for both terms.
constexpr int kTwoProductRows = 256;

// Scratch per row of x for products of width `cols` with at most `widest` outputs: the rounded
// operand (one term), or the two-term operand and, for the stacked GEMM, the partial products of
// one product at a time.
size_t scratch_per_row(Precision precision, int n, int cols, int widest) {
  if (precision == Precision::Bf16) return static_cast<size_t>(cols) * 2;
  const size_t operand = 2 * static_cast<size_t>(cols) * 2;
  return n >= kTwoProductRows ? operand : operand + 2 * static_cast<size_t>(widest) * 4;
}

int widest(std::span<const Product> products) {
  int most = 0;
  for (const Product& p : products) most = std::max(most, p.w.out);
  return most;
}

// Rows split per GEMM, so that the scratch of one chunk stays within 64 MiB; decode steps are one
// chunk, long prompts several.
int split_rows(Precision precision, int n, int cols, int widest) {
  constexpr size_t kChunkBytes = size_t{64} << 20;
  return static_cast<int>(std::clamp<size_t>(
      kChunkBytes / scratch_per_row(precision, n, cols, widest), 1, static_cast<size_t>(n)));
}

}  // namespace

size_t Gemm::scratch_bytes(int n, std::span<const Product> products) const {
  if (n <= 0 || products.empty() || products[0].w.dtype == DType::F32) return 0;
  const int cols = products[0].w.in, most = widest(products);
  return static_cast<size_t>(split_rows(precision_, n, cols, most)) *
         scratch_per_row(precision_, n, cols, most);
}

size_t Gemm::scratch_bytes(int n, const WeightMatrix& w) const {
  const Product one{w};
  return scratch_bytes(n, {&one, 1});
}

void Gemm::product(const void* operand, int n, const WeightMatrix& w, const float* bias, float* y,
                   bool accumulate, cudaStream_t stream) {
  const PlanKey key{n,
                    w.in,
                    w.out,
                    w.dtype,
                    accumulate,
                    bias != nullptr,
                    alignment(w.data),
                    alignment(operand),
                    alignment(y)};
  Plan& plan = plan_for(key);
  if (bias) set_op(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  PHOTON_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, w.data, plan.a, operand, plan.b,
                                     &beta, y, plan.c, y, plan.c, &plan.algo, workspace_.data(),
                                     workspace_.bytes(), stream));
}

void Gemm::linear(const float* x, int n, const WeightMatrix& w, const float* bias, float* y,
                  bool accumulate, Arena& scratch, cudaStream_t stream) {
  const Product one{w, y, accumulate};
  products(x, n, {&one, 1}, bias, scratch, stream);
}

void Gemm::linear_group(const float* x, int n, std::span<const Product> group, Arena& scratch,
                        cudaStream_t stream) {
  products(x, n, group, nullptr, scratch, stream);
}

void Gemm::products(const float* x, int n, std::span<const Product> group, const float* bias,
                    Arena& scratch, cudaStream_t stream) {
  if (n <= 0 || group.empty()) return;
  const DType dtype = group[0].w.dtype;
  const int cols = group[0].w.in;
  bool one_type = true;
  for (const Product& p : group) {
    check(p.w.in == cols && cols > 0 && p.w.out > 0 && p.w.data != nullptr, PHOTON_ERR_INTERNAL,
          "cuda::Gemm::linear: a weight matrix without rows or data, or not of the input's width");
    one_type = one_type && p.w.dtype == dtype;
  }
  if (!one_type) {
    // A file may store its matrices in different types: each then splits x for its own.
    for (const Product& p : group) products(x, n, {&p, 1}, bias, scratch, stream);
    return;
  }
  if (dtype == DType::F32) {
    for (const Product& p : group) product(x, n, p.w, bias, p.y, p.accumulate, stream);
    return;
  }
  const int rows = split_rows(precision_, n, cols, widest(group));
  for (int r0 = 0; r0 < n; r0 += rows) {
    const int count = std::min(rows, n - r0);
    const size_t in = static_cast<size_t>(count) * cols;
    ArenaScope scope(scratch);
    if (precision_ == Precision::Bf16) {
      // operand: [count, cols], bf16(x), rounded once for every product.
      void* operand = scratch.take_bytes(in * 2, "GEMM activations");
      round_activations(dtype, x + static_cast<size_t>(r0) * cols, in, operand, stream);
      for (const Product& p : group)
        product(operand, count, p.w, bias, p.y + static_cast<size_t>(r0) * p.w.out, p.accumulate,
                stream);
      continue;
    }
    // operand: [2 count, cols], hi rows then lo rows, split once for every product.
    char* operand = static_cast<char*>(scratch.take_bytes(2 * in * 2, "GEMM activations"));
    split_activations(dtype, x + static_cast<size_t>(r0) * cols, in, operand, operand + in * 2,
                      stream);
    for (const Product& p : group) {
      float* y_rows = p.y + static_cast<size_t>(r0) * p.w.out;
      if (n >= kTwoProductRows) {
        product(operand, count, p.w, bias, y_rows, p.accumulate, stream);
        product(operand + in * 2, count, p.w, nullptr, y_rows, /*accumulate=*/true, stream);
        continue;
      }
      ArenaScope partial(scratch);
      // parts: [2 count, p.w.out], the products of hi and of lo, summed by sum_halves.
      float* parts =
          scratch.take<float>(2 * static_cast<size_t>(count) * p.w.out, "GEMM partial products");
      product(operand, 2 * count, p.w, nullptr, parts, /*accumulate=*/false, stream);
      sum_halves(parts, count, p.w.out, bias, p.accumulate, y_rows, stream);
    }
  }
}

}  // namespace photon::cuda
