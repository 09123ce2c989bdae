#include "bench_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <utility>

#include "common.h"

namespace photon::cli::bench {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
const char* const kMissing = "–";

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

// (model, mode) pairs in the order their first run appears: the rows of a table.
std::vector<std::pair<std::string, std::string>> model_modes(const std::vector<Record>& runs) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const Record& run : runs) {
    std::pair<std::string, std::string> key{run["model"], run["mode"]};
    if (std::find(rows.begin(), rows.end(), key) == rows.end()) rows.push_back(key);
  }
  return rows;
}

std::vector<std::string> regimes(const std::vector<Record>& runs) {
  std::vector<std::string> names;
  for (const Record& run : runs) {
    const std::string name = run["regime"];
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

const Record* find_run(const std::vector<Record>& runs,
                       const std::pair<std::string, std::string>& row, const char* key,
                       const std::string& value) {
  for (const Record& run : runs) {
    if (run["model"] == row.first && run["mode"] == row.second && run[key] == value) return &run;
  }
  return nullptr;
}

const Record* find_run(const std::vector<Record>& runs,
                       const std::pair<std::string, std::string>& row, const char* key,
                       int64_t value) {
  for (const Record& run : runs) {
    if (run["model"] == row.first && run["mode"] == row.second && run[key] == value) return &run;
  }
  return nullptr;
}

std::string millions(uint64_t parameters) {
  return format("%.1f M", parameters / 1e6);
}

// The per-regime cells of one row: `cell` formats a run, kMissing where the regime did not run.
template <typename Cell>
std::string regime_cells(const std::vector<Record>& runs,
                         const std::pair<std::string, std::string>& row,
                         const std::vector<std::string>& names, Cell cell) {
  std::string text;
  for (const std::string& regime : names) {
    const Record* run = find_run(runs, row, "regime", regime);
    text += " " + (run != nullptr ? cell(*run) : std::string(kMissing)) + " |";
  }
  return text;
}

std::string regime_header(const std::string& what, const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& regime : names) text += " " + what + " " + regime + " |";
  return text;
}

// A run's measured memory figure; runs recorded before device memory was measured have only the
// resident one.
double measured(const Record& run, const char* key, const char* resident_key) {
  return (run.contains(key) ? run[key] : run[resident_key]).get<double>();
}

std::string separator(size_t columns) {
  std::string text = "|";
  for (size_t i = 0; i < columns; ++i) text += "---|";
  return text + "\n";
}

}  // namespace

std::string mebibytes(double bytes) {
  const double mib = bytes / kMiB;
  if (mib >= 100.0) return format("%.0f", mib);
  if (mib >= 10.0) return format("%.1f", mib);
  if (mib >= 0.1) return format("%.2f", mib);
  return format("%.4f", mib);
}

std::string significant(double value) {
  if (!(value == value)) return kMissing;
  const double magnitude = value < 0 ? -value : value;
  if (magnitude >= 100.0) return format("%.0f", value);
  if (magnitude >= 10.0) return format("%.1f", value);
  if (magnitude >= 1.0) return format("%.2f", value);
  if (magnitude >= 0.01) return format("%.3f", value);
  return format("%.2g", value);
}

std::string throughput_tables(const std::vector<Record>& runs) {
  const auto rows = model_modes(runs);
  const auto names = regimes(runs);
  std::string text =
      "TPM = throughput / memory per sample, in tok/s per MiB; memory per sample = growth of the "
      "process's resident memory (CPU) or of the model's device memory (GPU, photon_model_memory) "
      "per added sample (sessions alive after generation); "
      "throughput = generated tokens / wall time including prefill, in tok/s.\n\n"
      "| model | parameters | mode | batch |" +
      regime_header("TPM", names) + regime_header("MiB/sample", names) +
      regime_header("tok/s", names) + "\n" + separator(4 + 3 * names.size());
  for (const auto& row : rows) {
    const Record* any = nullptr;
    std::string batches;
    for (const std::string& regime : names) {
      const Record* run = find_run(runs, row, "regime", regime);
      if (run == nullptr) continue;
      if (any == nullptr) any = run;
      batches += (batches.empty() ? "" : "/") + std::to_string(run->at("batch").get<int64_t>());
    }
    text += "| " + row.first + " | " + millions(any->at("parameters")) + " | " + row.second +
            " | " + batches + " |";
    text += regime_cells(runs, row, names, [](const Record& run) {
      return significant(measured(run, "tpm_tok_s_per_gib", "tpm_resident_tok_s_per_gib") / 1024.0);
    });
    text += regime_cells(runs, row, names, [](const Record& run) {
      return mebibytes(
          measured(run, "memory_bytes_per_sample", "resident_growth_bytes_per_sample"));
    });
    text += regime_cells(runs, row, names, [](const Record& run) {
      return significant(run["throughput_tok_s"].get<double>());
    });
    text += "\n";
  }
  text +=
      "\nMemory per sample in MiB, each way: the KV caches that grow with the context by the "
      "configuration's formula at the regime's context (f32 as this engine computes; bf16 as the "
      "paper's GPU runs store them), the engine's own accounting (photon_session_kv_bytes: the "
      "growing caches, then the open local windows), and the memory measured (resident or device, "
      "as above). TPM by the "
      "formula's f32 bytes, in tok/s per MiB.\n\n"
      "| model | mode | regime | KV formula f32 | KV formula bf16 | engine KV | engine windows | "
      "resident | TPM (KV f32) |\n" +
      separator(9);
  for (const auto& row : rows) {
    for (const std::string& regime : names) {
      const Record* run = find_run(runs, row, "regime", regime);
      if (run == nullptr) continue;
      const Record& r = *run;
      text +=
          "| " + row.first + " | " + row.second + " | " + regime + " | " +
          mebibytes(r["kv_analytic_bytes_per_sample"].get<double>()) + " | " +
          mebibytes(r["kv_analytic_bf16_bytes_per_sample"].get<double>()) + " | " +
          mebibytes(r["kv_engine_bytes_per_sample"].get<double>()) + " | " +
          mebibytes(r["kv_engine_window_bytes_per_sample"].get<double>()) + " | " +
          mebibytes(measured(r, "memory_bytes_per_sample", "resident_growth_bytes_per_sample")) +
          " | " + significant(r["tpm_kv_tok_s_per_gib"].get<double>() / 1024.0) + " |\n";
    }
  }
  return text;
}

std::string scaling_table(const std::vector<Record>& runs) {
  const auto rows = model_modes(runs);
  std::vector<int64_t> contexts;
  for (const Record& run : runs) contexts.push_back(run["context_tokens"]);
  std::sort(contexts.begin(), contexts.end());
  contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());

  std::string text =
      "Decode time per generated token (ms, one session) and the KV bytes the engine holds "
      "(MiB, growing caches) at each context length.\n\n| context tokens |";
  for (const auto& row : rows) text += " " + row.first + " " + row.second + " ms/token |";
  for (const auto& row : rows) text += " " + row.first + " " + row.second + " KV MiB |";
  text += "\n" + separator(1 + 2 * rows.size());
  for (int64_t context : contexts) {
    text += "| " + std::to_string(context) + " |";
    for (const auto& row : rows) {
      const Record* run = find_run(runs, row, "context_tokens", context);
      text +=
          " " + (run ? significant((*run)["decode_ms_per_token"].get<double>()) : kMissing) + " |";
    }
    for (const auto& row : rows) {
      const Record* run = find_run(runs, row, "context_tokens", context);
      text += " " + (run ? mebibytes((*run)["kv_engine_bytes"].get<double>()) : kMissing) + " |";
    }
    text += "\n";
  }
  return text;
}

std::string kv_table(const std::vector<Record>& runs) {
  double smallest = std::numeric_limits<double>::infinity();
  for (const Record& run : runs) {
    smallest = std::min(smallest, run["kv_engine_bytes"].get<double>());
  }
  std::string text =
      "KV bytes per sample after the prefill and a few generated tokens, in MiB: the caches that "
      "grow with the context as the engine reports them (photon_session_kv_bytes) against the "
      "formula of the configuration (layers x 2 x positions x kv_dim x bytes; RecGen: the top "
      "level only), the open local windows, and the resident memory the session added.\n\n"
      "| model | mode | tokens | engine KV (f32) | formula f32 | equal | formula bf16 | "
      "engine windows | resident | x smallest |\n" +
      separator(10);
  for (const Record& run : runs) {
    const double engine = run["kv_engine_bytes"].get<double>();
    text += "| " + run["model"].get<std::string>() + " | " + run["mode"].get<std::string>() +
            " | " + std::to_string(run["context_tokens"].get<int64_t>()) + " | " +
            mebibytes(engine) + " | " + mebibytes(run["kv_analytic_bytes"].get<double>()) + " | " +
            (run["kv_engine_bytes"] == run["kv_analytic_bytes"] ? "yes" : "**no**") + " | " +
            mebibytes(run["kv_analytic_bf16_bytes"].get<double>()) + " | " +
            mebibytes(run["kv_engine_window_bytes"].get<double>()) + " | " +
            mebibytes(run["resident_growth_bytes"].get<double>()) + " | " +
            (smallest > 0 ? format("%.1f", engine / smallest) : std::string(kMissing)) + " |\n";
  }
  return text;
}

std::string tables(const std::vector<Record>& runs) {
  std::string text;
  for (const char* study : {"throughput", "kv", "scaling"}) {
    std::vector<Record> mine;
    for (const Record& run : runs) {
      if (run.value("study", "") == study) mine.push_back(run);
    }
    if (mine.empty()) continue;
    if (!text.empty()) text += "\n";
    text += study == std::string("throughput") ? throughput_tables(mine)
            : study == std::string("kv")       ? kv_table(mine)
                                               : scaling_table(mine);
  }
  return text;
}

std::vector<Record> read_records(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw RuntimeFailure("cannot read the JSON lines '" + path + "'");
  std::vector<Record> records;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Record record = Record::parse(line, nullptr, false);
    if (record.is_discarded() || !record.is_object() || !record.contains("study")) {
      throw RuntimeFailure("'" + path + "' line " + std::to_string(number) +
                           " is not a photon bench record");
    }
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace photon::cli::bench
