#include "serve/metrics.h"

#include <cmath>
#include <cstdio>

namespace photon::serve {
namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const char* name, const char* help) const {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name;
    out += "_bucket{le=\"";
    out += i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += "\"} ";
    out += std::to_string(cumulative);
    out += '\n';
  }
  out += std::string(name) + "_sum " + number(sum_) + "\n";
  out += std::string(name) + "_count " + std::to_string(count_) + "\n";
}

void render_metric(std::string& out, const char* name, const char* type, const char* help,
                   double value) {
  header(out, name, type, help);
  out += name;
  out += ' ';
  out += number(value);
  out += '\n';
}

Metrics::Metrics()
    : queue_seconds({0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      first_token_seconds({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      token_gap_seconds({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      request_seconds({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void Metrics::render_own(std::string& out) const {
  header(out, "photon_http_requests_total", "counter",
         "HTTP requests answered, by route and status code");
  for (const auto& [key, count] : requests) {
    out += "photon_http_requests_total{route=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  }
  queue_seconds.render(out, "photon_request_queue_seconds",
                       "Time from submission to admission by the engine");
  first_token_seconds.render(out, "photon_request_first_token_seconds",
                             "Time from submission to the first generated token");
  token_gap_seconds.render(out, "photon_request_token_gap_seconds",
                           "Each request's mean time between generated tokens");
  request_seconds.render(out, "photon_http_request_seconds",
                         "Time from a generation request's arrival to the end of its reply");
  render_metric(out, "photon_client_disconnects_total", "counter",
                "Generations cancelled because the client went away", disconnects);
  render_metric(out, "photon_http_connections_accepted_total", "counter", "Connections accepted",
                connections_accepted);
  render_metric(out, "photon_http_connections_refused_total", "counter",
                "Connections refused over --max-connections", connections_refused);
  render_metric(out, "photon_conversations_resumed_total", "counter",
                "Turns that continued their conversation's saved state", conversations_resumed);
  render_metric(out, "photon_conversations_full_prefill_total", "counter",
                "Turns with a conversation id that read their whole prompt instead",
                conversations_full_prefill);
  render_metric(out, "photon_conversations_saved_total", "counter",
                "Conversation states saved to the store", conversations_saved);
  render_metric(out, "photon_conversation_conflicts_total", "counter",
                "Saves not made because another turn of the conversation saved first",
                conversation_conflicts);
  render_metric(out, "photon_conversation_store_errors_total", "counter",
                "Loads and saves that failed in the store (unreachable, timed out, I/O)",
                conversation_store_errors);
  render_metric(
      out, "photon_conversation_states_refused_total", "counter",
      "Stored conversations refused (a damaged record, a state the model cannot continue)",
      conversation_states_refused);
}

}  // namespace photon::serve
