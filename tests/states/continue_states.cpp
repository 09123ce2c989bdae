// photon_continue_states MODEL (STATE BUDGET)...: restores each saved session state for MODEL in
// this process, continues it (state_runs.h: generate calls until BUDGET tokens or a call delivers
// none, a prefill of known tokens, more generate calls) and prints the continuation as one JSON
// line, or {"error": ...} when a step fails. The saved-session
// property test (test_state_fields.cpp) compares these runs with its own, so that a state is shown
// to carry everything a session needs to a process that shares nothing with the one that saved it.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "photon.h"
#include "state_runs.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc % 2 != 0) {
    std::fprintf(stderr, "usage: photon_continue_states MODEL (STATE BUDGET)...\n");
    return 2;
  }
  photon_model* model = nullptr;
  if (photon_model_load(argv[1], nullptr, &model) != PHOTON_OK) {
    std::fprintf(stderr, "%s: %s\n", argv[1], photon_last_error());
    return 1;
  }
  for (int i = 2; i + 1 < argc; i += 2) {
    photon_session* s = nullptr;
    photon::state_runs::Continuation continuation;
    nlohmann::json line;
    if (photon_session_restore_file(model, argv[i], &s) != PHOTON_OK ||
        photon::state_runs::continue_session(s, std::atoi(argv[i + 1]), &continuation) != PHOTON_OK)
      line = {{"error", std::string(argv[i]) + ": " + photon_last_error()}};
    else
      line = photon::state_runs::to_json(continuation);
    photon_session_free(s);
    std::cout << line.dump() << "\n";
  }
  photon_model_free(model);
  return 0;
}
