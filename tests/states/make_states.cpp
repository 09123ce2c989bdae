// Writes the saved states of tests/states/saved/ with the library it is built with:
//   build/bin/photon_make_states tests/states/saved
// for every session of saved_states.h its state (<name>.phss) and what it does once restored
// (expected.json), and the states that tests/damaged damages (damage_<mode>.phss). The committed
// files were written by the release whose formats they keep (versions 1 and 2); a later build
// writes its own format, so rerun this only to add states of a new format version.
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include "damage_cases.h"
#include "saved_states.h"
#include "tiny_models.h"

namespace {

using namespace photon::saved_states;
using photon::hardening::write_file;

std::vector<uint8_t> save(photon_session* s) {
  size_t size = 0;
  photon_session_save(s, nullptr, 0, &size);
  std::vector<uint8_t> blob(size);
  check(photon_session_save(s, blob.data(), blob.size(), &size), "save");
  return blob;
}

photon_model* load(const std::string& path) {
  photon_model* model = nullptr;
  check(photon_model_load(path.c_str(), nullptr, &model), "load " + path);
  return model;
}

void write_states(const std::string& dir, const photon::hardening::TempDir& tmp) {
  photon_model* models[4] = {};
  for (int levels = 0; levels <= 3; ++levels) {
    const std::string path = tmp.file("model_" + std::to_string(levels) + ".photon");
    write_model(levels, path);
    models[levels] = load(path);
  }
  nlohmann::json expected = nlohmann::json::object();
  for (const Kind& k : kKinds)
    for (const Variant& v : kVariants) {
      photon_session* s = saved_session(models[k.levels], k, v);
      const std::vector<uint8_t> blob = save(s);
      photon_session_free(s);
      write_file(dir + "/" + state_name(k, v) + ".phss", blob);
      photon_session* restored = nullptr;
      check(photon_session_restore(models[k.levels], blob.data(), blob.size(), &restored),
            "restore " + state_name(k, v));
      expected[state_name(k, v)] = to_json(continue_session(restored));
      photon_session_free(restored);
    }
  std::ofstream(dir + "/expected.json") << expected.dump(1) << "\n";
  for (photon_model* m : models) photon_model_free(m);
}

void write_damage_bases(const std::string& dir, const photon::hardening::TempDir& tmp) {
  const std::string photon_path = tmp.file("tiny_2.photon"),
                    vanilla_path = tmp.file("tiny_0.photon");
  photon::hardening::write_tiny_model(photon_path, photon::hardening::tiny_config(2));
  photon::hardening::write_tiny_model(vanilla_path, photon::hardening::tiny_config(0));
  photon_model* photon = load(photon_path);
  photon_model* vanilla = load(vanilla_path);
  const photon::hardening::StateBases bases = photon::hardening::base_states(photon, vanilla);
  write_file(dir + "/damage_hiergen.phss", bases.hiergen);
  write_file(dir + "/damage_recgen.phss", bases.recgen);
  write_file(dir + "/damage_vanilla.phss", bases.vanilla);
  photon_model_free(photon);
  photon_model_free(vanilla);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: photon_make_states <directory>\n");
    return 2;
  }
  try {
    const photon::hardening::TempDir tmp;
    write_states(argv[1], tmp);
    write_damage_bases(argv[1], tmp);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "photon_make_states: %s\n", e.what());
    return 1;
  }
  return 0;
}
