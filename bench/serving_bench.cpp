// Serving benchmark on the public API: a seeded open-loop arrival process (Poisson at a given rate;
// prompt and output lengths drawn uniformly around given means) replayed in real time against
//   engine       the continuous-batching engine (photon_engine, its own worker thread);
//   static       static batches: requests wait until `batch` have arrived (or no more will), then
//                run together (photon_session_prefill_batch, photon_session_generate_batch);
//   sequential   one request at a time (photon_session_prefill, photon_session_generate).
// For each rate and scheduler it prints throughput (generated tokens per second of the run), time
// to first token, time between tokens and queue time (p50 / p99, milliseconds) and the mean
// number of requests in flight, as a markdown table; --json appends one JSON line per row.
//
//   photon_serving_bench -m MODEL [--mode auto|hiergen|recgen] [--kv-type f32|bf16|f16]
//       [--threads N] [--rates 1,2,4] [--requests 64] [--prompt 128] [--output 64]
//       [--spread 0.5] [--batch 32] [--max-running 64] [--seed 1]
//       [--schedulers engine,static,sequential] [--json FILE]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "photon.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "photon_serving_bench: %s: %s\n", what.c_str(), photon_last_error());
  std::exit(1);
}

void ok(photon_status status, const char* what) {
  if (status != PHOTON_OK) die(what);
}

struct Settings {
  std::string model;
  photon_mode mode = PHOTON_MODE_AUTO;
  photon_dtype kv_type = PHOTON_DTYPE_F32;
  int threads = 0;
  std::vector<double> rates = {1.0};
  int requests = 64;
  int prompt = 128;
  int output = 64;
  double spread = 0.5;
  int batch = 32;
  int max_running = 64;
  uint64_t seed = 1;
  std::vector<std::string> schedulers = {"engine", "static", "sequential"};
  std::string json;
};

// One request of the arrival process and what happened to it.
struct Job {
  double arrival = 0;  // seconds after the start
  std::vector<int32_t> prompt;
  int output = 0;
  Clock::time_point arrived, started;
  std::vector<Clock::time_point> tokens;  // when each token was delivered
};

std::vector<Job> arrivals(const Settings& s, double rate, int vocab) {
  std::mt19937_64 rng(s.seed);
  std::exponential_distribution<double> gap(rate);
  const auto around = [&](int mean) {
    const int lo = std::max(1, static_cast<int>(std::lround(mean * (1 - s.spread))));
    const int hi = std::max(lo, static_cast<int>(std::lround(mean * (1 + s.spread))));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::vector<Job> jobs(static_cast<size_t>(s.requests));
  double t = 0;
  for (Job& j : jobs) {
    t += gap(rng);
    j.arrival = t;
    const int n = around(s.prompt);
    j.prompt.push_back(1);
    for (int i = 1; i < n; ++i)
      j.prompt.push_back(3 + static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab - 3)));
    j.output = around(s.output);
    j.tokens.reserve(static_cast<size_t>(j.output));
  }
  return jobs;
}

photon_session_options* session_options(const Settings& s) {
  photon_session_options* o = nullptr;
  ok(photon_session_options_create(&o), "session options");
  photon_session_options_set_mode(o, s.mode);
  photon_session_options_set_kv_type(o, s.kv_type);
  photon_session_options_set_ignore_eos(o, 1);
  return o;
}

int record(void* user, int32_t, const char*, size_t, float) {
  auto* job = static_cast<Job*>(user);
  job->tokens.push_back(Clock::now());
  return static_cast<int>(job->tokens.size()) >= job->output ? 1 : 0;
}

// Calls arrive(job) for each job at its arrival time, on the calling thread.
template <typename Arrive>
void replay(std::vector<Job>& jobs, Clock::time_point start, Arrive arrive) {
  for (Job& j : jobs) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(j.arrival)));
    j.arrived = Clock::now();
    arrive(j);
  }
}

void run_engine(const Settings& s, photon_model* model, std::vector<Job>& jobs) {
  photon_engine_options* eo = nullptr;
  ok(photon_engine_options_create(&eo), "engine options");
  photon_engine_options_set_max_running(eo, s.max_running);
  photon_engine_options_set_max_waiting(eo, s.requests);
  photon_engine* engine = nullptr;
  ok(photon_engine_create(model, eo, &engine), "engine");
  photon_engine_options_free(eo);
  ok(photon_engine_start(engine), "engine start");
  photon_session_options* so = session_options(s);
  std::vector<photon_request*> requests;
  replay(jobs, Clock::now(), [&](Job& j) {
    photon_request_options* o = nullptr;
    ok(photon_request_options_create(&o), "request options");
    photon_request_options_set_session_options(o, so);
    photon_request_options_set_prompt(o, j.prompt.data(), j.prompt.size());
    photon_request_options_set_max_tokens(o, j.output);
    photon_request_options_set_callback(o, record, &j);
    photon_request* r = nullptr;
    ok(photon_engine_submit(engine, o, &r), "submit");
    photon_request_options_free(o);
    requests.push_back(r);
  });
  for (size_t i = 0; i < requests.size(); ++i) {
    ok(photon_request_wait(requests[i], -1), "wait");
    double queued = 0;
    photon_request_get_stat(requests[i], PHOTON_REQUEST_QUEUE_SECONDS, &queued);
    jobs[i].started = jobs[i].arrived + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(queued));
    photon_request_free(requests[i]);
  }
  ok(photon_engine_stop(engine, PHOTON_ENGINE_DRAIN), "engine stop");
  photon_engine_free(engine);
  photon_session_options_free(so);
}

// The static and sequential schedulers: a worker takes up to `batch` arrived jobs at a time, once
// that many have arrived or no more will.
void run_batches(const Settings& s, photon_model* model, std::vector<Job>& jobs, int batch) {
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<Job*> queue;
  bool all_arrived = false;
  photon_session_options* so = session_options(s);
  std::thread worker([&] {
    for (;;) {
      std::vector<Job*> group;
      {
        std::unique_lock<std::mutex> lock(mutex);
        arrived.wait(lock, [&] {
          return static_cast<int>(queue.size()) >= batch || (all_arrived && !queue.empty()) ||
                 (all_arrived && queue.empty());
        });
        if (queue.empty()) return;
        while (!queue.empty() && static_cast<int>(group.size()) < batch) {
          group.push_back(queue.front());
          queue.pop_front();
        }
      }
      const Clock::time_point start = Clock::now();
      std::vector<photon_session*> sessions(group.size());
      std::vector<const int32_t*> prompts;
      std::vector<size_t> lengths;
      int longest = 0;
      for (size_t i = 0; i < group.size(); ++i) {
        group[i]->started = start;
        ok(photon_session_create(model, so, &sessions[i]), "session");
        prompts.push_back(group[i]->prompt.data());
        lengths.push_back(group[i]->prompt.size());
        longest = std::max(longest, group[i]->output);
      }
      ok(photon_session_prefill_batch(sessions.data(), sessions.size(), prompts.data(),
                                      lengths.data()),
         "prefill batch");
      ok(photon_session_generate_batch(
             sessions.data(), sessions.size(), longest,
             [](void* user, size_t i, int32_t token, const char* piece, size_t len, float lp) {
               return record(static_cast<Job**>(user)[i], token, piece, len, lp);
             },
             group.data(), nullptr),
         "generate batch");
      for (photon_session* session : sessions) photon_session_free(session);
    }
  });
  replay(jobs, Clock::now(), [&](Job& j) {
    std::lock_guard<std::mutex> lock(mutex);
    queue.push_back(&j);
    arrived.notify_one();
  });
  {
    std::lock_guard<std::mutex> lock(mutex);
    all_arrived = true;
    arrived.notify_one();
  }
  worker.join();
  photon_session_options_free(so);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double at = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

struct Row {
  std::string scheduler;
  double rate, throughput, ttft50, ttft99, tbt50, tbt99, queue50, queue99, in_flight;
  int64_t tokens;
};

Row summarize(const std::string& scheduler, double rate, const std::vector<Job>& jobs) {
  const auto ms = [](Clock::duration d) { return std::chrono::duration<double>(d).count() * 1e3; };
  std::vector<double> ttft, tbt, queue;
  Clock::time_point first = jobs.front().arrived, last = first;
  double latency_sum = 0;
  int64_t tokens = 0;
  for (const Job& j : jobs) {
    queue.push_back(ms(j.started - j.arrived));
    if (j.tokens.empty()) continue;
    ttft.push_back(ms(j.tokens.front() - j.arrived));
    for (size_t i = 1; i < j.tokens.size(); ++i) tbt.push_back(ms(j.tokens[i] - j.tokens[i - 1]));
    last = std::max(last, j.tokens.back());
    latency_sum += ms(j.tokens.back() - j.arrived) / 1e3;
    tokens += static_cast<int64_t>(j.tokens.size());
  }
  const double span = std::chrono::duration<double>(last - first).count();
  return {scheduler,
          rate,
          static_cast<double>(tokens) / span,
          percentile(ttft, 0.5),
          percentile(ttft, 0.99),
          percentile(tbt, 0.5),
          percentile(tbt, 0.99),
          percentile(queue, 0.5),
          percentile(queue, 0.99),
          latency_sum / span,
          tokens};
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) die("option " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "-m") {
      s.model = v;
    } else if (a == "--mode") {
      s.mode = v == "recgen"    ? PHOTON_MODE_RECGEN
               : v == "hiergen" ? PHOTON_MODE_HIERGEN
               : v == "auto"
                   ? PHOTON_MODE_AUTO
                   : (die("--mode " + v + " is not auto, hiergen or recgen"), PHOTON_MODE_AUTO);
    } else if (a == "--kv-type") {
      s.kv_type = v == "bf16"  ? PHOTON_DTYPE_BF16
                  : v == "f16" ? PHOTON_DTYPE_F16
                  : v == "f32"
                      ? PHOTON_DTYPE_F32
                      : (die("--kv-type " + v + " is not f32, bf16 or f16"), PHOTON_DTYPE_F32);
    } else if (a == "--threads") {
      s.threads = std::atoi(v.c_str());
    } else if (a == "--rates") {
      s.rates.clear();
      for (const std::string& r : split(v)) s.rates.push_back(std::atof(r.c_str()));
    } else if (a == "--requests") {
      s.requests = std::atoi(v.c_str());
    } else if (a == "--prompt") {
      s.prompt = std::atoi(v.c_str());
    } else if (a == "--output") {
      s.output = std::atoi(v.c_str());
    } else if (a == "--spread") {
      s.spread = std::atof(v.c_str());
    } else if (a == "--batch") {
      s.batch = std::atoi(v.c_str());
    } else if (a == "--max-running") {
      s.max_running = std::atoi(v.c_str());
    } else if (a == "--seed") {
      s.seed = std::strtoull(v.c_str(), nullptr, 10);
    } else if (a == "--schedulers") {
      s.schedulers = split(v);
    } else if (a == "--json") {
      s.json = v;
    } else {
      die("unknown option " + a);
    }
  }
  if (s.model.empty()) die("give the model with -m");
  for (double r : s.rates)
    if (!(r > 0)) die("--rates must be positive");
  if (s.requests < 1 || s.prompt < 1 || s.output < 1 || s.batch < 1 || s.max_running < 1 ||
      s.spread < 0 || s.spread >= 1)
    die("--requests, --prompt, --output, --batch, --max-running must be >= 1, --spread in [0, 1)");
  for (const std::string& sc : s.schedulers)
    if (sc != "engine" && sc != "static" && sc != "sequential")
      die("--schedulers: " + sc + " is not engine, static or sequential");
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Settings s = parse(argc, argv);
  photon_load_options* lo = nullptr;
  ok(photon_load_options_create(&lo), "load options");
  photon_load_options_set_threads(lo, s.threads);
  photon_model* model = nullptr;
  ok(photon_model_load(s.model.c_str(), lo, &model), s.model.c_str());
  photon_load_options_free(lo);
  const int vocab = photon_model_vocab_size(model);
  std::FILE* json = s.json.empty() ? nullptr : std::fopen(s.json.c_str(), "a");
  std::printf(
      "| scheduler | rate (req/s) | in flight | tok/s | TTFT p50 | TTFT p99 | TBT p50 | "
      "TBT p99 | queue p50 | queue p99 |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (double rate : s.rates)
    for (const std::string& scheduler : s.schedulers) {
      std::vector<Job> jobs = arrivals(s, rate, vocab);
      if (scheduler == "engine")
        run_engine(s, model, jobs);
      else
        run_batches(s, model, jobs, scheduler == "static" ? s.batch : 1);
      const Row r = summarize(scheduler, rate, jobs);
      std::printf("| %s | %.2f | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f |\n",
                  r.scheduler.c_str(), r.rate, r.in_flight, r.throughput, r.ttft50, r.ttft99,
                  r.tbt50, r.tbt99, r.queue50, r.queue99);
      std::fflush(stdout);
      if (json)
        std::fprintf(json,
                     "{\"model\": \"%s\", \"scheduler\": \"%s\", \"rate\": %g, \"requests\": %d, "
                     "\"prompt\": %d, \"output\": %d, \"in_flight\": %.3f, \"tokens\": %lld, "
                     "\"tok_s\": %.3f, \"ttft_p50_ms\": %.3f, \"ttft_p99_ms\": %.3f, "
                     "\"tbt_p50_ms\": %.3f, \"tbt_p99_ms\": %.3f, \"queue_p50_ms\": %.3f, "
                     "\"queue_p99_ms\": %.3f}\n",
                     s.model.c_str(), r.scheduler.c_str(), r.rate, s.requests, s.prompt, s.output,
                     r.in_flight, static_cast<long long>(r.tokens), r.throughput, r.ttft50,
                     r.ttft99, r.tbt50, r.tbt99, r.queue50, r.queue99);
    }
  if (json) std::fclose(json);
  photon_model_free(model);
  return 0;
}
