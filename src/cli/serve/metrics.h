// What GET /metrics reports, in Prometheus' text format (version 0.0.4): the server's own counts
// and histograms, kept here, beside the engine's statistics, which the server reads when asked.
// Used on the server's network thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace photon::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  void render(std::string& out, const char* name, const char* help) const;

 private:
  std::vector<double> bounds_;    // upper bounds, increasing; +Inf is implicit
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), the last for +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// "# HELP", "# TYPE" and one sample line.
void render_metric(std::string& out, const char* name, const char* type, const char* help,
                   double value);

struct Metrics {
  Metrics();

  // Replies by route ("/v1/completions", ..., "other") and HTTP status.
  std::map<std::pair<std::string, int>, uint64_t> requests;
  Histogram queue_seconds;        // from submit to admission
  Histogram first_token_seconds;  // from submit to the first token
  Histogram token_gap_seconds;    // each request's mean time between tokens
  Histogram request_seconds;      // from the request's arrival to its reply's end
  uint64_t disconnects = 0;       // generations cancelled because their client went away
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;  // over --max-connections
  uint64_t conversations_resumed = 0;
  uint64_t conversations_full_prefill = 0;  // an id given, but its state could not be continued
  uint64_t conversations_saved = 0;
  uint64_t conversation_conflicts = 0;  // a save that lost to a concurrent turn
  uint64_t conversation_store_errors = 0;
  uint64_t conversation_states_refused = 0;  // a stored record or state that could not be used

  void render_own(std::string& out) const;
};

}  // namespace photon::serve
