// Writes a small random PHOTON model (preset photon-small) whose metadata holds a chat template
// under photon.chat_template, for the serve tests.
//
// usage: write_template_model OUT.photon TEMPLATE.json
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "photon.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_template_model OUT.photon TEMPLATE.json\n");
    return 2;
  }
  std::ifstream in(argv[2]);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    std::fprintf(stderr, "write_template_model: cannot read %s\n", argv[2]);
    return 1;
  }
  char config[16384];
  size_t length = 0;
  photon_write_options* options = nullptr;
  const bool ok =
      photon_preset_config("photon-small", config, sizeof config, &length) == PHOTON_OK &&
      photon_write_options_create(&options) == PHOTON_OK &&
      photon_write_options_set_seed(options, 3) == PHOTON_OK &&
      photon_write_options_set_metadata(options, "photon.chat_template", text.str().c_str()) ==
          PHOTON_OK &&
      photon_model_init_random(config, argv[1], options) == PHOTON_OK;
  if (!ok) std::fprintf(stderr, "write_template_model: %s\n", photon_last_error());
  photon_write_options_free(options);
  return ok ? 0 : 1;
}
