// The hand-made corpus of damaged inputs (docs/security.md): every field of the model-file and
// session-state formats damaged on its own, each refused with its own status and message, or,
// where a field holds no invariant a reader could check, accepted and still usable.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "damage_cases.h"
#include "photon.h"
#include "schema_fields.h"
#include "tiny_models.h"

namespace photon::hardening {
namespace {

struct Tokens {
  std::vector<int32_t> ids;
};

int collect(void* user, int32_t token, const char*, size_t, float) {
  static_cast<Tokens*>(user)->ids.push_back(token);
  return 0;
}

class Damaged : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string paths[] = {dir_->file("photon.photon"), dir_->file("vanilla.photon")};
    write_tiny_model(paths[kPhotonModel], tiny_config(2));
    write_tiny_model(paths[kVanillaModel], tiny_config(0));
    for (int m : {kPhotonModel, kVanillaModel}) {
      files_[m] = read_file(paths[m]);
      ASSERT_EQ(photon_model_load(paths[m].c_str(), nullptr, &models_[m]), PHOTON_OK)
          << photon_last_error();
    }
    bases_ = base_states(models_[kPhotonModel], models_[kVanillaModel]);
  }
  static void TearDownTestSuite() {
    for (photon_model*& m : models_) photon_model_free(m), m = nullptr;
    delete dir_;
  }

  // The tokens a restored state generates next, or an empty list if it is refused.
  static std::vector<int32_t> continuation(int model, const std::vector<uint8_t>& state) {
    photon_session* session = nullptr;
    Tokens out;
    if (photon_session_restore(models_[model], state.data(), state.size(), &session) != PHOTON_OK)
      return {};
    EXPECT_EQ(photon_session_generate(session, 4, collect, &out, nullptr), PHOTON_OK)
        << photon_last_error();
    photon_session_free(session);
    return out.ids;
  }

  static TempDir* dir_;
  static std::vector<uint8_t> files_[2];
  static photon_model* models_[2];
  static StateBases bases_;
};

TempDir* Damaged::dir_ = nullptr;
std::vector<uint8_t> Damaged::files_[2];
photon_model* Damaged::models_[2] = {};
StateBases Damaged::bases_;

std::string describe(const DamageCase& c) {
  return c.field + " (" + c.damage + ")";
}

TEST_F(Damaged, UnchangedRebuildsStayValid) {
  // The cases are rebuilt through FlatBuffers' object API: without a change, that must give a file
  // and states that work exactly as the originals.
  for (int m : {kPhotonModel, kVanillaModel}) {
    const std::string path = dir_->file("rebuilt.photon");
    write_file(path, rebuilt_model_file(files_[m]));
    photon_model* model = nullptr;
    EXPECT_EQ(photon_model_load(path.c_str(), nullptr, &model), PHOTON_OK) << photon_last_error();
    photon_model_free(model);
  }
  const StateBases released = released_bases();
  const std::pair<int, const std::vector<uint8_t>*> states[] = {
      {kPhotonModel, &bases_.hiergen},  {kPhotonModel, &bases_.recgen},
      {kVanillaModel, &bases_.vanilla}, {kPhotonModel, &released.hiergen},
      {kPhotonModel, &released.recgen}, {kVanillaModel, &released.vanilla}};
  for (const auto& [model, state] : states) {
    const std::vector<int32_t> expected = continuation(model, *state);
    ASSERT_EQ(expected.size(), 4u) << photon_last_error();
    EXPECT_EQ(continuation(model, rebuilt_state(*state)), expected) << photon_last_error();
  }
}

TEST_F(Damaged, ModelFilesFailWithTheirOwnErrors) {
  const std::string path = dir_->file("damaged.photon");
  for (const DamageCase& c : damaged_model_files(files_[kPhotonModel], files_[kVanillaModel])) {
    SCOPED_TRACE(describe(c));
    write_file(path, c.bytes);
    photon_model* model = nullptr;
    const photon_status status = photon_model_load(path.c_str(), nullptr, &model);
    EXPECT_STREQ(photon_status_name(status), photon_status_name(c.status)) << photon_last_error();
    if (status == PHOTON_OK) {
      EXPECT_GT(photon_model_tensor_count(model), 0u);
      photon_model_free(model);
    } else {
      EXPECT_EQ(model, nullptr);
      EXPECT_NE(std::string(photon_last_error()).find(c.message), std::string::npos)
          << photon_last_error() << "\n  expected a message with: " << c.message;
    }
  }
}

TEST_F(Damaged, SessionStatesFailWithTheirOwnErrors) {
  for (const DamageCase& c : damaged_session_states(bases_)) {
    SCOPED_TRACE(describe(c));
    photon_session* session = nullptr;
    const photon_status status =
        photon_session_restore(models_[c.model], c.bytes.data(), c.bytes.size(), &session);
    EXPECT_STREQ(photon_status_name(status), photon_status_name(c.status)) << photon_last_error();
    if (status == PHOTON_OK) {
      int32_t generated = 0;
      EXPECT_EQ(photon_session_generate(session, 3, nullptr, nullptr, &generated), PHOTON_OK)
          << photon_last_error();
      photon_session_free(session);
    } else {
      EXPECT_EQ(session, nullptr);
      EXPECT_NE(std::string(photon_last_error()).find(c.message), std::string::npos)
          << photon_last_error() << "\n  expected a message with: " << c.message;
    }
  }
}

TEST_F(Damaged, EveryFieldOfBothFormatsHasACase) {
  std::set<std::string> covered;
  for (const DamageCase& c : damaged_model_files(files_[kPhotonModel], files_[kVanillaModel]))
    covered.insert(c.field);
  for (const DamageCase& c : damaged_session_states(bases_)) covered.insert(c.field);
  size_t fields = 0;
  const std::pair<const char*, const char*> schemas[] = {
      {"model.fbs", ""}, {"session.fbs", ""}, {"session_v2.fbs", "v2."}};
  for (const auto& [schema, prefix] : schemas)
    for (const std::string& f : photon::testing::schema_fields(schema, prefix)) {
      ++fields;
      EXPECT_EQ(covered.count(f), 1u) << f << " of " << schema << " has no damaged case";
    }
  EXPECT_GT(fields, 120u);  // the schemas were read
}

}  // namespace
}  // namespace photon::hardening
