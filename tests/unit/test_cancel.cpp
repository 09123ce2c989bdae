// A cancellation request stops a prefill between slices and leaves the session usable.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model.h"
#include "engine/session.h"
#include "test_models.h"

namespace {

TEST(Cancel, StopsPrefillBetweenSlicesAndKeepsTheSessionUsable) {
  photon::ModelConfig config = photon::testing::tiny_photon(2);
  config.max_seq_len = 4096;
  const std::string path = std::string(PHOTON_BINARY_DIR) + "/test_cancel.photon";
  photon::testing::write_test_model(config, path, 5);
  const auto model = photon::Model::load(path, {});
  std::vector<int32_t> prompt(3 * photon::Runner::kPrefillSlice, 7);
  prompt[0] = 1;
  for (photon::Mode mode : {photon::Mode::HierGen, photon::Mode::RecGen}) {
    auto session =
        photon::Session::create(*model, mode, config.max_seq_len, {}, photon::DType::F32);
    session->cancel_requested = true;
    try {
      session->runner->prefill(*session, prompt, nullptr);
      ADD_FAILURE() << "a cancelled prefill returned normally";
    } catch (const photon::Error& e) {
      EXPECT_EQ(e.status(), PHOTON_ERR_CANCELLED);
    }
    EXPECT_TRUE(session->history.empty()) << "cancelled before the first slice";
    session->cancel_requested = false;
    session->runner->prefill(*session, prompt, nullptr);
    EXPECT_EQ(session->history.size(), prompt.size());
  }
  std::remove(path.c_str());
}

}  // namespace
