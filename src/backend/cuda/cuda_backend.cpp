// The CUDA backend's memory: the device pool, the op scratch arena, pinned staging, weights,
// host <-> device copies and row copies. The ops are in cuda_ops.cpp.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/cuda/convert.h"
#include "backend/cuda/copy_rows.h"

namespace photon::cuda {

namespace {

constexpr size_t kInitialScratch = size_t{16} << 20;
constexpr size_t kInitialPinned = size_t{4} << 20;
constexpr size_t kGemmWorkspace = size_t{32} << 20;
// Four times the rows of 4,096 took an H200's prefill of 256 prompts of 2,048 tokens from 0.46 s
// to 0.35 s (RecGen; HierGen 0.44 s to 0.33 s); four times more again gained 4-16%, with passes'
// workspaces four times larger.
constexpr int64_t kPrefillPassRows = 16384;

// PHOTON_CUDA_PREFILL_ROWS, when set: the rows of a batched prefill's pass.
int64_t prefill_pass_rows_from_environment() {
  const char* value = std::getenv("PHOTON_CUDA_PREFILL_ROWS");
  if (value == nullptr || *value == '\0') return kPrefillPassRows;
  char* end = nullptr;
  const long long rows = std::strtoll(value, &end, 10);
  check(*end == '\0' && rows >= 1 && rows <= (int64_t{1} << 24), PHOTON_ERR_INVALID_ARGUMENT,
        "PHOTON_CUDA_PREFILL_ROWS must be a number of rows from 1 to 16777216, not '" +
            std::string(value) + "'");
  return rows;
}

// Every backend's pool in the process, by device. A pool keeps what its model freed, so when an
// allocation fails, the pools of the other models on the device (a process may load several)
// are trimmed too before the last try. Never destroyed: backends may outlive static destructors.
class PoolRegistry {
 public:
  static PoolRegistry& get() {
    static PoolRegistry* registry = new PoolRegistry;
    return *registry;
  }
  void add(int device, cudaMemPool_t pool) {
    const std::lock_guard<std::mutex> guard(mutex_);
    pools_.emplace_back(device, pool);
  }
  void remove(cudaMemPool_t pool) {
    const std::lock_guard<std::mutex> guard(mutex_);
    std::erase_if(pools_, [pool](const auto& entry) { return entry.second == pool; });
  }
  // Gives back to the device what every pool on it holds free (blocks whose frees are still
  // queued on another backend's stream stay).
  void trim(int device) {
    const std::lock_guard<std::mutex> guard(mutex_);
    for (const auto& [on, pool] : pools_)
      if (on == device) cudaMemPoolTrimTo(pool, 0);
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<int, cudaMemPool_t>> pools_;
};

// After an allocation failed: the backend's own pool (errors reported), then every pool on the
// device. The caller has synchronized its stream, so its own freed blocks can all go.
void trim_pools(cudaMemPool_t own, int device) {
  PHOTON_CUDA_CHECK(cudaMemPoolTrimTo(own, 0));
  PoolRegistry::get().trim(device);
}

// Whether a copy's destination meets another copy's source or destination (or its own source):
// then the copies must run in order.
bool any_overlap(std::span<const CopyDescriptor> copies) {
  struct Range {
    uintptr_t begin, end;
    bool written;
  };
  std::vector<Range> ranges;
  ranges.reserve(2 * copies.size());
  for (const CopyDescriptor& c : copies) {
    const auto dst = reinterpret_cast<uintptr_t>(c.dst), src = reinterpret_cast<uintptr_t>(c.src);
    ranges.push_back({dst, dst + c.bytes, true});
    ranges.push_back({src, src + c.bytes, false});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  uintptr_t end_any = 0, end_written = 0;  // the furthest end so far, of any and of written ranges
  for (const Range& r : ranges) {
    if (r.begin < end_written || (r.written && r.begin < end_any)) return true;
    end_any = std::max(end_any, r.end);
    if (r.written) end_written = std::max(end_written, r.end);
  }
  return false;
}

// A buffer from the backend's pool, handed back to it on destruction.
class PoolBuffer final : public Buffer {
 public:
  PoolBuffer(CudaBackend* owner, void* memory, size_t bytes, MemoryCounter& counter)
      : Buffer(owner, memory, bytes), backend_(owner), counter_(counter) {
    counter_.add(bytes);
  }
  ~PoolBuffer() override {
    if (base()) backend_->release(base());
    counter_.remove(bytes());
  }

 private:
  CudaBackend* backend_;
  MemoryCounter& counter_;
};

}  // namespace

class CudaBackend::PinnedHost {
 public:
  explicit PinnedHost(size_t bytes) : bytes_(bytes) {
    check_cuda(cudaMallocHost(&data_, bytes),
               "cudaMallocHost of " + describe_bytes(bytes) + " for the staging of host tables");
  }
  ~PinnedHost() { cudaFreeHost(data_); }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  char* data() const { return static_cast<char*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

CudaBackend::Lock::Lock(const CudaBackend& backend, const char* op)
    : guard_(backend.mutex_),
      device_(backend.device_.info().ordinal),
      profiler_(op != nullptr ? backend.profiler_.get() : nullptr),
      stream_(backend.stream()) {
  if (profiler_) profiler_->begin(op, stream_);
}

CudaBackend::Lock::~Lock() {
  if (profiler_) profiler_->end(stream_);
}

CudaBackend::CudaBackend(const CudaOptions& options)
    : Backend(options.precision),
      device_(options.ordinal),
      exact_f32_(options.exact_f32),
      prefill_pass_rows_(prefill_pass_rows_from_environment()) {
  int pools = 0;
  PHOTON_CUDA_CHECK(
      cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_.info().ordinal));
  check(pools != 0, PHOTON_ERR_DEVICE,
        "CUDA device " + std::to_string(device_.info().ordinal) + " (" + device_.info().name +
            ") does not support stream-ordered memory pools");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_.info().ordinal;
  PHOTON_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
  try {
    // Keep what is freed: sessions and workspaces come and go without returning memory to the
    // driver (pool_allocate trims the pool when the device is full).
    uint64_t keep = std::numeric_limits<uint64_t>::max();
    PHOTON_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    gemm_ = std::make_unique<Gemm>(kGemmWorkspace, options.precision);
    scratch_ = Arena(kInitialScratch, "CUDA backend scratch");
    memory_.add(kGemmWorkspace + scratch_.capacity());
    pinned_ = std::make_unique<PinnedHost>(kInitialPinned);
  } catch (...) {
    gemm_.reset();
    cudaMemPoolDestroy(pool_);
    throw;
  }
  PoolRegistry::get().add(device_.info().ordinal, pool_);
  profiler_ = Profiler::from_environment(name());
}

CudaBackend::~CudaBackend() {
  weights_.clear();  // each returns its memory to the pool
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_.info().ordinal);
  cudaStreamSynchronize(stream());
  profiler_.reset();  // its report waits for its events on the stream
  gemm_.reset();
  scratch_ = Arena();
  pinned_.reset();
  PoolRegistry::get().remove(pool_);
  cudaMemPoolDestroy(pool_);
  if (previous >= 0) cudaSetDevice(previous);
  cudaGetLastError();
}

std::string CudaBackend::name() const {
  return "cuda:" + std::to_string(device_.info().ordinal);
}

void* CudaBackend::pool_allocate(size_t bytes, std::string_view what) {
  if (bytes == 0) return nullptr;
  void* memory = nullptr;
  cudaError_t status = cudaMallocFromPoolAsync(&memory, bytes, pool_, stream());
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    // This pool, or another model's, may hold freed blocks that do not fit this request: give
    // them back to the device once the work that used them is done, then try once more.
    synchronize();
    trim_pools(pool_, device_.info().ordinal);
    status = cudaMallocFromPoolAsync(&memory, bytes, pool_, stream());
  }
  check_cuda(status, "allocation of " + describe_bytes(bytes) + " for " + std::string(what) +
                         " on " + name() + " (" + device_.info().name + ")");
  return memory;
}

void CudaBackend::release(void* device_memory) noexcept {
  if (device_memory == nullptr) return;
  const std::lock_guard<std::recursive_mutex> guard(mutex_);
  // A destructor cannot report a failure; a failed release leaves the block to the pool, which is
  // destroyed with the backend.
  int previous = -1;
  cudaGetDevice(&previous);
  const int ordinal = device_.info().ordinal;
  if (previous != ordinal) cudaSetDevice(ordinal);
  cudaFreeAsync(device_memory, stream());
  if (previous >= 0 && previous != ordinal) cudaSetDevice(previous);
  cudaGetLastError();
}

void CudaBackend::reserve_scratch(size_t bytes, int pieces) {
  const size_t need = bytes + static_cast<size_t>(pieces) * Arena::kAlignment;
  if (scratch_.capacity() >= need) return;
  // The old arena may still be read by queued work.
  synchronize();
  const size_t grown = std::max(need, 2 * scratch_.capacity());
  memory_.remove(scratch_.capacity());
  scratch_ = Arena();
  try {
    scratch_ = Arena(grown, "CUDA backend scratch");
  } catch (const Error& e) {
    if (e.status() != PHOTON_ERR_OUT_OF_MEMORY) throw;
    trim_pools(pool_, device_.info().ordinal);
    scratch_ = Arena(need, "CUDA backend scratch");
  }
  memory_.add(scratch_.capacity());
}

void* CudaBackend::pinned(size_t bytes) {
  const size_t rounded = (bytes + 15) / 16 * 16;
  if (pinned_used_ + rounded > pinned_->bytes()) {
    synchronize();  // every copy from the buffer has completed
    if (rounded > pinned_->bytes()) {
      pinned_.reset();
      pinned_ = std::make_unique<PinnedHost>(std::max(rounded, 2 * kInitialPinned));
    }
  }
  void* at = pinned_->data() + pinned_used_;
  pinned_used_ += rounded;
  return at;
}

void CudaBackend::synchronize() {
  device_.synchronize();
  pinned_used_ = 0;
}

std::unique_ptr<Buffer> CudaBackend::allocate(size_t bytes, std::string_view what) {
  Lock lock(*this, "allocate");
  return std::make_unique<PoolBuffer>(this, pool_allocate(bytes, what), bytes, memory_);
}

Tensor CudaBackend::do_weight(const HostWeight& source, std::string_view name) {
  if (source.dtype == DType::Q8)
    fail(PHOTON_ERR_UNSUPPORTED, "weight '" + std::string(name) +
                                     "' is stored as q8, which the CUDA backend does not compute; "
                                     "run the model on the CPU, or convert it with --dtype bf16");
  Lock lock(*this, "weight");
  const size_t count = static_cast<size_t>(source.rows) * static_cast<size_t>(source.cols);
  // Vectors (norms, biases, the start latent) are read as f32 by the kernels that take them.
  DType stored = source.dtype;
  if (source.rows == 1)
    stored = DType::F32;
  else if (source.dtype == DType::F32 && !exact_f32_)
    stored = DType::BF16;
  const std::string what = "weight " + std::string(name);
  auto buffer = std::make_unique<PoolBuffer>(this, pool_allocate(count * dtype_size(stored), what),
                                             count * dtype_size(stored), memory_);
  const size_t source_bytes = count * dtype_size(source.dtype);
  if (stored == source.dtype) {
    PHOTON_CUDA_CHECK(cudaMemcpyAsync(buffer->base(), source.data, source_bytes,
                                      cudaMemcpyHostToDevice, stream()));
  } else {
    // The file's values once on the device, converted there (round to nearest even).
    PoolBuffer staging(this, pool_allocate(source_bytes, what + " (upload)"), source_bytes,
                       memory_);
    PHOTON_CUDA_CHECK(cudaMemcpyAsync(staging.base(), source.data, source_bytes,
                                      cudaMemcpyHostToDevice, stream()));
    if (stored == DType::F32)
      convert_to_f32(source.dtype, staging.base(), static_cast<float*>(buffer->base()), count,
                     stream());
    else
      convert_from_f32(stored, static_cast<const float*>(staging.base()), buffer->base(), count,
                       stream());
  }
  // The source is the mapped file: done with it once this returns, and a fault shows here.
  synchronize();
  const Tensor t{buffer.get(), 0, source.rows, source.cols, stored};
  weights_.push_back(std::move(buffer));
  return t;
}

void CudaBackend::do_upload(const Tensor& dst, const void* src) {
  if (dst.bytes() == 0) return;
  Lock lock(*this, "upload");
  PHOTON_CUDA_CHECK(
      cudaMemcpyAsync(address(dst), src, dst.bytes(), cudaMemcpyHostToDevice, stream()));
  synchronize();  // src is the caller's, and may go when this returns
}

void CudaBackend::do_download(void* dst, const Tensor& src) {
  if (src.bytes() == 0) return;
  Lock lock(*this, "download");
  PHOTON_CUDA_CHECK(
      cudaMemcpyAsync(dst, address(src), src.bytes(), cudaMemcpyDeviceToHost, stream()));
  synchronize();
}

void CudaBackend::do_copy_rows(std::span<const RowCopy> copies) {
  Lock lock(*this, "copy_rows");
  std::vector<CopyDescriptor> descriptors;
  descriptors.reserve(copies.size());
  size_t largest = 0;
  for (const RowCopy& c : copies) {
    if (c.src.bytes() == 0) continue;
    descriptors.push_back({address(c.dst), address(c.src), c.src.bytes()});
    largest = std::max(largest, c.src.bytes());
  }
  if (descriptors.empty()) return;
  // One launch runs the copies in any order: only when no copy writes what another reads or
  // writes. Otherwise (never seen in the engine) they go one after another, as on the CPU.
  if (descriptors.size() == 1 || any_overlap(descriptors)) {
    for (const CopyDescriptor& d : descriptors)
      PHOTON_CUDA_CHECK(cudaMemcpyAsync(d.dst, d.src, d.bytes, cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  reserve_scratch(std::span<const CopyDescriptor>(descriptors).size_bytes(), 1);
  ArenaScope scope(scratch_);
  const CopyDescriptor* staged =
      stage(std::span<const CopyDescriptor>(descriptors), "row copy descriptors");
  copy_launch(staged, static_cast<int>(descriptors.size()), largest, stream());
}

}  // namespace photon::cuda
