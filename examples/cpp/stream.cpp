// stream -- the C example (examples/c/stream.c) in C++: photon.h with RAII handles and exceptions.
// Loads a PHOTON model, streams a completion through a callback and through the pull API, saves
// the session, restores it and continues.
//
//   usage: stream [MODEL] [PROMPT] [N]
//
// MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to "In the beginning", N to 16.
#include <photon.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Every handle type with its free function, so that nothing leaks when a call throws.
struct Free {
  void operator()(photon_model* model) const { photon_model_free(model); }
  void operator()(photon_session* session) const { photon_session_free(session); }
  void operator()(photon_session_options* options) const { photon_session_options_free(options); }
};
using ModelPtr = std::unique_ptr<photon_model, Free>;
using SessionPtr = std::unique_ptr<photon_session, Free>;
using OptionsPtr = std::unique_ptr<photon_session_options, Free>;

void check(photon_status status, const char* what) {
  if (status != PHOTON_OK) throw std::runtime_error(std::string(what) + ": " + photon_last_error());
}

// Calls of the library's two-call protocol: the first asks for the size (the buffer may be empty).
std::vector<int32_t> tokenize(const photon_model* model, const std::string& text) {
  size_t needed = 0;
  photon_model_tokenize(model, text.data(), text.size(), 1, nullptr, 0, &needed);
  std::vector<int32_t> tokens(needed);
  check(photon_model_tokenize(model, text.data(), text.size(), 1, tokens.data(), tokens.size(),
                              &needed),
        "cannot tokenize the prompt");
  return tokens;
}

std::vector<unsigned char> save(photon_session* session) {
  size_t size = 0;
  photon_session_save(session, nullptr, 0, &size);
  std::vector<unsigned char> state(size);
  check(photon_session_save(session, state.data(), state.size(), &size), "cannot save");
  return state;
}

void pull(photon_session* session, long n) {
  for (long i = 0; i < n; ++i) {
    int32_t token = -1;
    char piece[64];
    size_t length = 0;
    check(photon_session_next_token(session, &token, piece, sizeof piece, &length, nullptr),
          "generation failed");
    if (token < 0) return;  // generation stopped: photon_session_stop_reason says why
    std::cout.write(piece, static_cast<std::streamsize>(length)).flush();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 4) {
    std::cerr << "usage: " << argv[0] << " [MODEL] [PROMPT] [N]\n";
    return 2;
  }
  const std::string path = argc > 1 ? argv[1] : "models/photon-kjv.photon";
  const std::string prompt = argc > 2 ? argv[2] : "In the beginning";
  try {
    const long n = argc > 3 ? std::stol(argv[3]) : 16;
    if (n < 0 || n > INT32_MAX) throw std::out_of_range("N must be a non-negative int32");

    photon_model* raw_model = nullptr;
    check(photon_model_load(path.c_str(), nullptr, &raw_model), "cannot load the model");
    ModelPtr model(raw_model);
    photon_session_options* raw_options = nullptr;
    check(photon_session_options_create(&raw_options), "cannot create options");
    OptionsPtr options(raw_options);
    check(photon_session_options_set_temperature(options.get(), 0.8f), "temperature");
    check(photon_session_options_set_seed(options.get(), 42), "seed");
    photon_session* raw_session = nullptr;
    check(photon_session_create(model.get(), options.get(), &raw_session), "no session");
    SessionPtr session(raw_session);
    const std::vector<int32_t> tokens = tokenize(model.get(), prompt);
    check(photon_session_prefill(session.get(), tokens.data(), tokens.size()), "prefill failed");
    std::cout << prompt;

    // 1. A callback receives each token as it is generated; returning non-zero would stop.
    auto on_token = [](void*, int32_t, const char* piece, size_t length, float) -> int {
      std::cout.write(piece, static_cast<std::streamsize>(length)).flush();
      return std::cout ? 0 : 1;
    };
    check(
        photon_session_generate(session.get(), static_cast<int32_t>(n), on_token, nullptr, nullptr),
        "generation failed");
    // 2. The pull API produces one token per call.
    pull(session.get(), n);
    // 3. Save the session, restore the state into a new session and continue there.
    const std::vector<unsigned char> state = save(session.get());
    photon_session* raw_restored = nullptr;
    check(photon_session_restore(model.get(), state.data(), state.size(), &raw_restored),
          "cannot restore");
    SessionPtr restored(raw_restored);
    pull(restored.get(), n);
    std::cout << std::endl;
    std::cerr << "[" << photon_session_position(restored.get()) << " tokens, "
              << (photon_session_mode(restored.get()) == PHOTON_MODE_RECGEN ? "recgen" : "hiergen")
              << ", state " << state.size() << " bytes]\n";
  } catch (const std::exception& error) {
    std::cerr << "stream: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
