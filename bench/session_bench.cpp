// Session benchmarks on the public API (docs/performance.md):
//   photon_session_bench throughput DIR   batched decode throughput at 1, 4, 16, 64 sessions
//   photon_session_bench state DIR        saved-state bytes against context length
//   photon_session_bench prefill DIR      prompts of many sessions: one prefill each against one
//                                         photon_session_prefill_batch (alternating, best of 5)
// DIR receives the random-weight models (photon-small, vanilla-small). Prints markdown tables.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "photon.h"

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "photon_session_bench: %s: %s\n", what, photon_last_error());
  std::exit(1);
}

void ok(photon_status status, const char* what) {
  if (status != PHOTON_OK) die(what);
}

photon_model* make_model(const std::string& dir, const char* preset) {
  const std::string path = dir + "/" + preset + ".photon";
  std::vector<char> json(4096);
  size_t len = 0;
  ok(photon_preset_config(preset, json.data(), json.size(), &len), "preset");
  photon_write_options* w = nullptr;
  ok(photon_write_options_create(&w), "write options");
  photon_write_options_set_seed(w, 1);
  if (FILE* f = std::fopen(path.c_str(), "rb"))
    std::fclose(f);
  else
    ok(photon_model_init_random(json.data(), path.c_str(), w), "init");
  photon_write_options_free(w);
  photon_model* m = nullptr;
  ok(photon_model_load(path.c_str(), nullptr, &m), "load");
  return m;
}

std::vector<int32_t> random_prompt(int n, uint32_t seed, int vocab) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p.push_back(3 + static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(vocab - 3)));
  }
  return p;
}

photon_session* new_session(photon_model* m, photon_mode mode) {
  photon_session_options* o = nullptr;
  ok(photon_session_options_create(&o), "options");
  photon_session_options_set_mode(o, mode);
  photon_session_options_set_ignore_eos(o, 1);
  photon_session_options_set_temperature(o, 0.8f);
  photon_session_options_set_context_length(o, 4096);
  photon_session* s = nullptr;
  ok(photon_session_create(m, o, &s), "session");
  photon_session_options_free(o);
  return s;
}

// The rows of a study: photon-small in both modes, then vanilla-small.
struct Row {
  const char* name;
  photon_model* model;
  photon_mode mode;
};
std::vector<Row> bench_rows(photon_model* photon, photon_model* vanilla) {
  return {{"photon-small RecGen", photon, PHOTON_MODE_RECGEN},
          {"photon-small HierGen", photon, PHOTON_MODE_HIERGEN},
          {"vanilla-small", vanilla, PHOTON_MODE_AUTO}};
}

void throughput(const std::string& dir) {
  photon_model* photon = make_model(dir, "photon-small");
  photon_model* vanilla = make_model(dir, "vanilla-small");
  const std::vector<Row> rows = bench_rows(photon, vanilla);
  const int kPrompt = 128, kGenerate = 128;
  std::printf(
      "| model / mode | sessions | generated tokens | decode s | tok/s |\n|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    for (int n : {1, 4, 16, 64}) {
      std::vector<photon_session*> sessions;
      for (int i = 0; i < n; ++i) {
        sessions.push_back(new_session(row.model, row.mode));
        const auto p = random_prompt(kPrompt + i % 7, 77 + i, photon_model_vocab_size(row.model));
        ok(photon_session_prefill(sessions.back(), p.data(), p.size()), "prefill");
      }
      std::vector<int32_t> counts(n);
      const auto start = std::chrono::steady_clock::now();
      ok(photon_session_generate_batch(sessions.data(), sessions.size(), kGenerate, nullptr,
                                       nullptr, counts.data()),
         "generate_batch");
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      long total = 0;
      for (int c : counts) total += c;
      std::printf("| %s | %d | %ld | %.3f | %.0f |\n", row.name, n, total, seconds,
                  total / seconds);
      std::fflush(stdout);
      for (photon_session* s : sessions) photon_session_free(s);
    }
  }
  photon_model_free(photon);
  photon_model_free(vanilla);
}

void state_sizes(const std::string& dir) {
  photon_model* photon = make_model(dir, "photon-small");
  photon_model* vanilla = make_model(dir, "vanilla-small");
  std::printf(
      "| context tokens | photon RecGen state | photon HierGen state | vanilla state | RecGen "
      "top-level KV |\n"
      "|---|---|---|---|---|\n");
  for (int n : {256, 1024, 4096}) {
    size_t bytes[3];
    uint64_t top_kv = 0;
    const photon_model* models[] = {photon, photon, vanilla};
    const photon_mode modes[] = {PHOTON_MODE_RECGEN, PHOTON_MODE_HIERGEN, PHOTON_MODE_AUTO};
    for (int k = 0; k < 3; ++k) {
      photon_session* s = new_session(const_cast<photon_model*>(models[k]), modes[k]);
      const auto p = random_prompt(n - 16, 5, 4096);
      ok(photon_session_prefill(s, p.data(), p.size()), "prefill");
      ok(photon_session_generate(s, 16, nullptr, nullptr, nullptr), "generate");
      ok(photon_session_save(s, nullptr, 0, &bytes[k]) == PHOTON_ERR_BUFFER_TOO_SMALL
             ? PHOTON_OK
             : PHOTON_ERR_INTERNAL,
         "size query");
      if (k == 0) ok(photon_session_kv_bytes(s, 2, &top_kv, nullptr), "kv bytes");
      photon_session_free(s);
    }
    std::printf("| %d | %.1f KiB | %.1f KiB | %.1f KiB | %.1f KiB |\n", n, bytes[0] / 1024.0,
                bytes[1] / 1024.0, bytes[2] / 1024.0, top_kv / 1024.0);
  }
  photon_model_free(photon);
  photon_model_free(vanilla);
}

// Seconds to prefill `n` fresh sessions with prompts of `tokens`, one call each or one batch.
double prefill_seconds(photon_model* m, photon_mode mode, int n, int tokens, bool batch) {
  std::vector<photon_session*> sessions;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<const int32_t*> data;
  std::vector<size_t> lengths;
  for (int i = 0; i < n; ++i) {
    sessions.push_back(new_session(m, mode));
    prompts.push_back(random_prompt(tokens, 91 + i, photon_model_vocab_size(m)));
  }
  for (const auto& p : prompts) {
    data.push_back(p.data());
    lengths.push_back(p.size());
  }
  const auto start = std::chrono::steady_clock::now();
  if (batch) {
    ok(photon_session_prefill_batch(sessions.data(), sessions.size(), data.data(), lengths.data()),
       "prefill_batch");
  } else {
    for (int i = 0; i < n; ++i)
      ok(photon_session_prefill(sessions[i], data[i], lengths[i]), "prefill");
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (photon_session* s : sessions) photon_session_free(s);
  return seconds;
}

void prefill(const std::string& dir) {
  photon_model* photon = make_model(dir, "photon-small");
  photon_model* vanilla = make_model(dir, "vanilla-small");
  const std::vector<Row> rows = bench_rows(photon, vanilla);
  std::printf(
      "| model / mode | sessions x prompt | one prefill each, prompt tok/s | prefill_batch, prompt "
      "tok/s | ratio |\n|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    for (const auto& [n, tokens] : {std::pair{16, 128}, std::pair{4, 2048}}) {
      double alone = 1e30, batch = 1e30;
      prefill_seconds(row.model, row.mode, n, tokens, true);  // workspaces sized first
      for (int r = 0; r < 5; ++r) {
        alone = std::min(alone, prefill_seconds(row.model, row.mode, n, tokens, false));
        batch = std::min(batch, prefill_seconds(row.model, row.mode, n, tokens, true));
      }
      const double total = static_cast<double>(n) * tokens;
      std::printf("| %s | %d x %d | %.0f | %.0f | %.2f |\n", row.name, n, tokens, total / alone,
                  total / batch, alone / batch);
      std::fflush(stdout);
    }
  }
  photon_model_free(photon);
  photon_model_free(vanilla);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string study = argc == 3 ? argv[1] : "";
  if (study != "throughput" && study != "state" && study != "prefill") {
    std::fprintf(stderr, "usage: photon_session_bench (throughput | state | prefill) DIR\n");
    return 2;
  }
  if (study == "throughput")
    throughput(argv[2]);
  else if (study == "state")
    state_sizes(argv[2]);
  else
    prefill(argv[2]);
  return 0;
}
