// The markdown tables of `photon bench`, built from the JSON records of its runs (one record per
// run, as written to the JSON lines).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace photon::cli::bench {

using Record = nlohmann::ordered_json;

// The paper's Table 1 layout (TPM, memory per sample and throughput for each regime, one row per
// model and mode), then the memory per sample measured each way.
std::string throughput_tables(const std::vector<Record>& runs);
// Decode time per token and KV bytes against the context, one column pair per model and mode.
std::string scaling_table(const std::vector<Record>& runs);
// KV bytes per sample after a prefill: the engine's accounting against the formula.
std::string kv_table(const std::vector<Record>& runs);

// The tables of every study present in `runs` (throughput, kv, scaling), in that order.
std::string tables(const std::vector<Record>& runs);
// The records of a JSON lines file written by --json; RuntimeFailure naming the file and line.
std::vector<Record> read_records(const std::string& path);

// 1.5 MiB -> "1.50"; the tables state their units in the header.
std::string mebibytes(double bytes);
// Three significant figures without exponents: 0.0123, 1.23, 123, 12345.
std::string significant(double value);

}  // namespace photon::cli::bench
