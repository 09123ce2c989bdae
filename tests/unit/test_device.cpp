// Device choice through the public API, on any machine: bad device strings, the CPU default,
// "auto" falling back to the CPU, and "cuda" failing with PHOTON_ERR_DEVICE and a message that
// names what is missing (the build, the CUDA libraries, the driver or the device) unless a GPU is
// really there. The module's location is steered with PHOTON_CUDA_MODULE.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "photon.h"
#include "test_models.h"

namespace {

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One file per test: ctest runs the tests of this suite side by side.
    path_ = std::string(PHOTON_BINARY_DIR) + "/test_device_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".photon";
    photon::testing::write_test_model(photon::testing::tiny_vanilla(), path_, 5);
    const char* module = std::getenv("PHOTON_CUDA_MODULE");
    saved_module_ = module ? module : "";
    had_module_ = module != nullptr;
  }
  void TearDown() override {
    if (had_module_)
      setenv("PHOTON_CUDA_MODULE", saved_module_.c_str(), 1);
    else
      unsetenv("PHOTON_CUDA_MODULE");
    std::remove(path_.c_str());
  }

  // Loads the test model on `device`; returns the status, *device_out the model's device.
  photon_status load(const char* device, std::string* device_out = nullptr) {
    photon_load_options* options = nullptr;
    EXPECT_EQ(photon_load_options_create(&options), PHOTON_OK);
    EXPECT_EQ(photon_load_options_set_device(options, device), PHOTON_OK) << photon_last_error();
    photon_model* model = nullptr;
    const photon_status status = photon_model_load(path_.c_str(), options, &model);
    photon_load_options_free(options);
    if (status == PHOTON_OK) {
      if (device_out) *device_out = photon_model_device(model);
      // The model works where it landed.
      const int32_t tokens[] = {1, 5, 9, 14};
      float logprobs[4];
      EXPECT_EQ(photon_model_score(model, tokens, 4, logprobs), PHOTON_OK) << photon_last_error();
      EXPECT_TRUE(std::isfinite(logprobs[3]));
    } else {
      EXPECT_EQ(model, nullptr);
    }
    photon_model_free(model);
    return status;
  }

  std::string path_;
  std::string saved_module_;
  bool had_module_ = false;
};

TEST_F(DeviceTest, BadDeviceStringsAreInvalidArguments) {
  photon_load_options* options = nullptr;
  ASSERT_EQ(photon_load_options_create(&options), PHOTON_OK);
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:+1", "cuda:x", "cuda:0x",
                          "cuda:12345", "cuda0", " cuda", "cpu "}) {
    EXPECT_EQ(photon_load_options_set_device(options, bad), PHOTON_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(photon_last_error()).find("device '" + std::string(bad) + "'"),
              std::string::npos)
        << photon_last_error();
  }
  EXPECT_EQ(photon_load_options_set_device(options, nullptr), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_load_options_set_device(nullptr, "cpu"), PHOTON_ERR_INVALID_ARGUMENT);
  for (const char* good : {"cpu", "auto", "cuda", "cuda:0", "cuda:7", "cuda:9999"})
    EXPECT_EQ(photon_load_options_set_device(options, good), PHOTON_OK) << good;
  photon_load_options_free(options);
  EXPECT_STREQ(photon_model_device(nullptr), "");
}

TEST_F(DeviceTest, CpuIsTheDefault) {
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(path_.c_str(), nullptr, &model), PHOTON_OK) << photon_last_error();
  EXPECT_STREQ(photon_model_device(model), "cpu");
  photon_model_free(model);
  std::string device;
  ASSERT_EQ(load("cpu", &device), PHOTON_OK);
  EXPECT_EQ(device, "cpu");
}

TEST_F(DeviceTest, CudaWithoutTheModuleSaysTheModuleIsMissing) {
  setenv("PHOTON_CUDA_MODULE", "/nonexistent/libphoton-cuda.so", 1);
  for (const char* device : {"cuda", "cuda:1"}) {
    ASSERT_EQ(load(device), PHOTON_ERR_DEVICE) << device;
    const std::string message = photon_last_error();
    EXPECT_EQ(message.rfind("no CUDA module", 0), 0u) << message;
    EXPECT_NE(message.find("/nonexistent/libphoton-cuda.so"), std::string::npos) << message;
  }
}

TEST_F(DeviceTest, AutoFallsBackToTheCpu) {
  setenv("PHOTON_CUDA_MODULE", "/nonexistent/libphoton-cuda.so", 1);
  std::string device;
  ASSERT_EQ(load("auto", &device), PHOTON_OK) << photon_last_error();
  EXPECT_EQ(device, "cpu");
}

TEST_F(DeviceTest, AModuleThatIsNotALibraryIsRefused) {
  setenv("PHOTON_CUDA_MODULE", path_.c_str(), 1);  // a model file, not a shared library
  ASSERT_EQ(load("cuda"), PHOTON_ERR_DEVICE);
  const std::string message = photon_last_error();
  EXPECT_NE(message.find("could not be loaded"), std::string::npos) << message;
  std::string device;
  ASSERT_EQ(load("auto", &device), PHOTON_OK) << photon_last_error();
  EXPECT_EQ(device, "cpu");
}

// With this build's own module (found beside the library or in ../lib): a GPU machine runs the
// model there; any other machine says which of the CUDA libraries, the driver or the device is
// missing, and "auto" still loads on the CPU.
TEST_F(DeviceTest, CudaRunsOrSaysWhatIsMissing) {
  unsetenv("PHOTON_CUDA_MODULE");
  std::string device;
  const photon_status status = load("cuda", &device);
  if (status == PHOTON_OK) {
    EXPECT_EQ(device, "cuda:0");
  } else {
    ASSERT_EQ(status, PHOTON_ERR_DEVICE);
    const std::string message = photon_last_error();
    bool named = false;
    for (const char* missing :
         {"no CUDA module", "no CUDA runtime", "no CUDA driver", "no CUDA device"})
      named = named || message.rfind(missing, 0) == 0;
    EXPECT_TRUE(named) << message;
  }
  ASSERT_EQ(load("auto", &device), PHOTON_OK) << photon_last_error();
  EXPECT_EQ(device, status == PHOTON_OK ? "cuda:0" : "cpu");
  // A device number past the machine's: PHOTON_ERR_DEVICE whatever is installed.
  ASSERT_EQ(load("cuda:9999"), PHOTON_ERR_DEVICE);
}

}  // namespace
