#include "backend/device.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/module.h"
#include "core/error.h"

namespace photon {

namespace {

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// Where the module may be: $PHOTON_CUDA_MODULE alone when set; otherwise next to the library or
// program that holds this code (libphoton.so in lib/), or in ../lib beside it (a program in bin/
// linked with the library's objects, such as the test binaries of a build tree).
std::vector<std::string> module_candidates() {
  if (const char* path = std::getenv("PHOTON_CUDA_MODULE"); path != nullptr && path[0] != '\0')
    return {path};
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&module_candidates), &info) == 0 || info.dli_fname == nullptr)
    return {};
  const std::string here = directory_of(info.dli_fname);
  return {here + "/" PHOTON_CUDA_MODULE_NAME, here + "/../lib/" PHOTON_CUDA_MODULE_NAME};
}

std::string joined(const std::vector<std::string>& paths) {
  std::string text;
  for (const std::string& p : paths) text += (text.empty() ? "" : " or ") + p;
  return text.empty() ? "(no location known)" : text;
}

// The module's entry point. A module once loaded stays loaded: its backends and their buffers
// point into its code.
photon_backend_create_fn load_cuda_module() {
  static std::mutex mutex;
  static std::map<std::string, photon_backend_create_fn> loaded;
  const std::vector<std::string> candidates = module_candidates();
  std::string path;
  for (const std::string& candidate : candidates)
    if (access(candidate.c_str(), F_OK) == 0) {
      path = candidate;
      break;
    }
  if (path.empty())
    fail(PHOTON_ERR_DEVICE,
         "no CUDA module: the CUDA backend " PHOTON_CUDA_MODULE_NAME " is not at " +
             joined(candidates) +
             " (a build with CUDA installs it beside libphoton and packs it into the Python wheel "
             "and the jar; a build without CUDA has none: configure with -DPHOTON_CUDA=ON)");
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto found = loaded.find(path); found != loaded.end()) return found->second;
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    const std::string reason = why != nullptr ? why : "unknown reason";
    // A missing dependency is named by the loader as "<library>: cannot open shared object file".
    const bool libraries = reason.find("libcu") != std::string::npos &&
                           reason.find("cannot open shared object") != std::string::npos;
    fail(PHOTON_ERR_DEVICE,
         (libraries ? "no CUDA runtime: the CUDA backend " + path +
                          " needs CUDA libraries (libcudart, libcublasLt) that cannot be loaded: "
                    : "the CUDA backend " + path + " could not be loaded: ") +
             reason);
  }
  auto create = reinterpret_cast<photon_backend_create_fn>(dlsym(handle, PHOTON_CUDA_MODULE_ENTRY));
  if (create == nullptr) {
    dlclose(handle);
    fail(PHOTON_ERR_DEVICE, path + " is not a PHOTON CUDA backend: it has no " +
                                PHOTON_CUDA_MODULE_ENTRY + " entry point");
  }
  loaded.emplace(path, create);
  return create;
}

// A failure of the module's backend, raised as this library's own photon::Error (module.h says
// why the module does not throw its own across).
void raise_module_error(photon_status status, const char* message) {
  fail(status, message != nullptr ? message : "the CUDA backend failed");
}

std::unique_ptr<Backend> make_cuda_backend(const DeviceChoice& choice) {
  const Precision precision = choice.precision.value_or(Precision::Bf16);
  if (precision == Precision::Int8)
    fail(PHOTON_ERR_UNSUPPORTED,
         "precision int8 runs on the CPU only (the CUDA backend has no q8 weights)");
  const photon_backend_create_fn create = load_cuda_module();
  const photon_backend_request request{
      PHOTON_BACKEND_ABI, backend_layout(),         PHOTON_VERSION_STRING,
      choice.ordinal,     choice.exact_f32 ? 1 : 0, precision == Precision::Bf16 ? 1 : 0,
      &raise_module_error};
  Backend* backend = nullptr;
  char message[1024] = "";
  const photon_status status = create(&request, &backend, message, sizeof message);
  if (status != PHOTON_OK) fail(status, message);
  if (backend == nullptr) fail(PHOTON_ERR_INTERNAL, "the CUDA backend module returned no backend");
  return std::unique_ptr<Backend>(backend);
}

}  // namespace

DeviceChoice parse_device(std::string_view text, std::string_view who) {
  DeviceChoice choice;
  if (text == "cpu") return choice;
  if (text == "auto") {
    choice.kind = DeviceChoice::Kind::Auto;
    return choice;
  }
  if (text == "cuda") {
    choice.kind = DeviceChoice::Kind::Cuda;
    return choice;
  }
  constexpr std::string_view kPrefix = "cuda:";
  bool ok = text.size() > kPrefix.size() && text.size() <= kPrefix.size() + 4 &&
            text.substr(0, kPrefix.size()) == kPrefix;
  int ordinal = 0;
  for (size_t i = kPrefix.size(); ok && i < text.size(); ++i) {
    ok = text[i] >= '0' && text[i] <= '9';
    ordinal = ordinal * 10 + (text[i] - '0');
  }
  if (!ok)
    fail(PHOTON_ERR_INVALID_ARGUMENT,
         std::string(who) + ": device '" + std::string(text) +
             "' is not one of auto, cpu, cuda, cuda:N (N a device number below 10000)");
  choice.kind = DeviceChoice::Kind::Cuda;
  choice.ordinal = ordinal;
  return choice;
}

Precision parse_precision(std::string_view text, std::string_view who) {
  if (text == "exact") return Precision::Exact;
  if (text == "bf16") return Precision::Bf16;
  if (text == "int8") return Precision::Int8;
  fail(PHOTON_ERR_INVALID_ARGUMENT, std::string(who) + ": precision '" + std::string(text) +
                                        "' is not one of exact, bf16, int8");
}

std::unique_ptr<Backend> make_backend(const DeviceChoice& choice, int threads) {
  const Precision cpu_precision = choice.precision.value_or(Precision::Exact);
  switch (choice.kind) {
    case DeviceChoice::Kind::Cpu: return make_cpu_backend(threads, cpu_precision);
    case DeviceChoice::Kind::Cuda: return make_cuda_backend(choice);
    case DeviceChoice::Kind::Auto:
      if (cpu_precision == Precision::Int8) return make_cpu_backend(threads, cpu_precision);
      try {
        return make_cuda_backend(choice);
      } catch (const Error& e) {
        // No usable GPU (missing, or full): the CPU.
        if (e.status() != PHOTON_ERR_DEVICE && e.status() != PHOTON_ERR_OUT_OF_MEMORY) throw;
      }
      return make_cpu_backend(threads, cpu_precision);
  }
  fail(PHOTON_ERR_INTERNAL, "make_backend: unknown device kind");
}

}  // namespace photon
