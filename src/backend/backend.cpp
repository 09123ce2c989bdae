// The op contract of backend.h, checked once per call before the backend's implementation runs.
// The checks build no string unless one fails: a decode step makes hundreds of these calls.
#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/logprob.h"
#include "core/error.h"

namespace photon {

namespace {

std::string describe(const Tensor& t) {
  return std::to_string(t.rows) + " x " + std::to_string(t.cols) + " " + dtype_name(t.dtype);
}

// Whether two tensors share a byte (of one buffer).
bool overlap(const Tensor& a, const Tensor& b) {
  if (a.buffer == nullptr || a.buffer != b.buffer || a.bytes() == 0 || b.bytes() == 0) return false;
  return a.offset < b.offset + b.bytes() && b.offset < a.offset + a.bytes();
}

// An operand as messages name it: "y", or an element of a list, "outs[2].y".
class Operand {
 public:
  Operand(const char* name) : name_(name) {}  // NOLINT(google-explicit-constructor)
  Operand(const char* list, size_t index, const char* field)
      : name_(list), index_(index), field_(field) {}

  std::string str() const {
    if (field_ == nullptr) return name_;
    return std::string(name_) + "[" + std::to_string(index_) + "]" + (*field_ ? "." : "") + field_;
  }

 private:
  const char* name_;
  size_t index_ = 0;
  const char* field_ = nullptr;
};

// The checks of one call of one backend.
class Contract {
 public:
  Contract(const Backend& backend, const char* call) : backend_(backend), call_(call) {}

  [[noreturn]] void fail(const Operand& operand, const std::string& why) const {
    photon::fail(PHOTON_ERR_INTERNAL,
                 backend_.name() + " " + call_ + ": " + operand.str() + " " + why);
  }

  // t lies wholly inside a buffer of this backend.
  void in_memory(const Tensor& t, const Operand& name) const {
    if (t.rows < 0 || t.cols < 0) fail(name, "has a negative shape, " + describe(t));
    if (t.buffer == nullptr) {
      if (t.bytes() == 0) return;
      fail(name, "(" + describe(t) + ") has no buffer");
    }
    if (t.buffer->owner() != &backend_) fail(name, "is not in this backend's memory");
    if (t.offset > t.buffer->bytes() || t.bytes() > t.buffer->bytes() - t.offset)
      fail(name, "(" + describe(t) + " at byte " + std::to_string(t.offset) +
                     ") runs past the end of its buffer of " + std::to_string(t.buffer->bytes()) +
                     " bytes");
  }
  // A weight matrix (linear's w, embed's table) in memory; q8 rows of whole blocks.
  void weights(const Tensor& t, const Operand& name) const {
    if (t.dtype == DType::Q8 && t.cols % kQ8Block != 0)
      fail(name, "is " + describe(t) + ", whose rows are not whole q8 blocks of " +
                     std::to_string(kQ8Block));
    in_memory(t, name);
  }
  void f32(const Tensor& t, const Operand& name) const {
    in_memory(t, name);
    if (t.dtype != DType::F32) fail(name, "is " + describe(t) + ", expected f32");
  }
  void shape(const Tensor& t, const Operand& name, int64_t rows, int64_t cols) const {
    if (t.rows != rows || t.cols != cols)
      fail(name, "is " + describe(t) + ", expected " + std::to_string(rows) + " x " +
                     std::to_string(cols));
  }
  void disjoint(const Tensor& a, const Operand& a_name, const Tensor& b,
                const Operand& b_name) const {
    if (overlap(a, b)) fail(a_name, "shares bytes with " + b_name.str());
  }
  void host(const void* p, size_t bytes, const Operand& name) const {
    if (p == nullptr && bytes > 0) fail(name, "is null");
  }
  void positive(int64_t value, const Operand& name) const {
    if (value <= 0) fail(name, "is " + std::to_string(value) + ", expected more than 0");
  }
  void even(int64_t value, const Operand& name) const {
    positive(value, name);
    if (value % 2 != 0) fail(name, "is " + std::to_string(value) + ", expected an even number");
  }
  // Every id in [0, size).
  void ids(std::span<const int32_t> ids, int64_t size, const char* name, const char* of) const {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= size)
        fail(Operand(name, i, ""),
             "is " + std::to_string(ids[i]) + ", outside the " + std::to_string(size) + " " + of);
  }

  // The segments of kv_append and attention: row ranges within [0, n), ascending and disjoint
  // where they have rows; caches of this backend, [capacity, kv_dim] of one type, with room.
  void segments(std::span<const AttentionSegment> segments, int64_t n, int64_t kv_dim) const {
    int64_t end = 0;  // of the last segment with rows
    for (size_t i = 0; i < segments.size(); ++i) {
      const AttentionSegment& s = segments[i];
      const Operand name("segments", i, "");
      if (s.row0 < 0 || s.rows < 0 || s.start < 0 || static_cast<int64_t>(s.row0) + s.rows > n)
        fail(name, "(rows " + std::to_string(s.row0) + " + " + std::to_string(s.rows) + ", start " +
                       std::to_string(s.start) + ") is outside the " + std::to_string(n) + " rows");
      if (s.rows > 0 && s.row0 < end)
        fail(name, "starts at row " + std::to_string(s.row0) + ", before the end (" +
                       std::to_string(end) + ") of the segment before it");
      if (s.rows > 0) end = s.row0 + s.rows;
      const Operand k("segments", i, "k"), v("segments", i, "v");
      in_memory(s.k, k);
      in_memory(s.v, v);
      shape(s.k, k, s.k.rows, kv_dim);
      shape(s.v, v, s.k.rows, kv_dim);
      if (s.v.dtype != s.k.dtype)
        fail(v, "is " + describe(s.v) + ", not of k's type " + dtype_name(s.k.dtype));
      if (static_cast<int64_t>(s.start) + s.rows > s.k.rows)
        fail(k, "has " + std::to_string(s.k.rows) + " positions, fewer than start " +
                    std::to_string(s.start) + " + " + std::to_string(s.rows) + " rows");
      disjoint(s.k, k, s.v, v);
    }
  }

 private:
  const Backend& backend_;
  const char* call_;
};

}  // namespace

Tensor Backend::weight(const HostWeight& source, std::string_view name) {
  const Contract c(*this, "weight");
  c.positive(source.rows, "rows");
  c.positive(source.cols, "cols");
  if (source.dtype == DType::Q8 && source.cols % kQ8Block != 0)
    c.fail("cols", "is " + std::to_string(source.cols) + ", not whole q8 blocks of " +
                       std::to_string(kQ8Block));
  c.host(source.data, 1, "data");
  const Tensor t = do_weight(source, name);
  c.weights(t, "result");
  c.shape(t, "result", source.rows, source.cols);
  return t;
}

void Backend::upload(const Tensor& dst, const void* src) {
  const Contract c(*this, "upload");
  c.in_memory(dst, "dst");
  c.host(src, dst.bytes(), "src");
  do_upload(dst, src);
}

void Backend::download(void* dst, const Tensor& src) {
  const Contract c(*this, "download");
  c.in_memory(src, "src");
  c.host(dst, src.bytes(), "dst");
  do_download(dst, src);
}

void Backend::copy_rows(std::span<const RowCopy> copies) {
  const Contract c(*this, "copy_rows");
  for (size_t i = 0; i < copies.size(); ++i) {
    const RowCopy& copy = copies[i];
    const Operand dst("copies", i, "dst"), src("copies", i, "src");
    c.in_memory(copy.dst, dst);
    c.in_memory(copy.src, src);
    c.shape(copy.dst, dst, copy.src.rows, copy.src.cols);
    if (copy.dst.dtype != copy.src.dtype)
      c.fail(dst, "is " + describe(copy.dst) + ", src " + describe(copy.src));
    c.disjoint(copy.dst, dst, copy.src, src);
  }
  do_copy_rows(copies);
}

void Backend::embed(const Tensor& table, std::span<const int32_t> ids, const Tensor& out) {
  const Contract c(*this, "embed");
  c.weights(table, "table");
  c.f32(out, "out");
  c.shape(out, "out", static_cast<int64_t>(ids.size()), table.cols);
  c.disjoint(out, "out", table, "table");
  c.ids(ids, table.rows, "ids", "rows of the table");
  do_embed(table, ids, out);
}

void Backend::rmsnorm(const Tensor& x, const Tensor& w, const Tensor& y, float eps) {
  const Contract c(*this, "rmsnorm");
  c.f32(x, "x");
  c.f32(w, "w");
  c.f32(y, "y");
  c.shape(w, "w", 1, x.cols);
  c.shape(y, "y", x.rows, x.cols);
  if (y.buffer != x.buffer || y.offset != x.offset) c.disjoint(y, "y", x, "x");
  c.disjoint(y, "y", w, "w");
  if (!(eps >= 0.0f) || std::isinf(eps)) c.fail("eps", "is " + std::to_string(eps));
  do_rmsnorm(x, w, y, eps);
}

void Backend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                     bool accumulate) {
  const Contract c(*this, "linear");
  c.f32(x, "x");
  c.weights(w, "w");
  c.shape(w, "w", w.rows, x.cols);
  c.f32(y, "y");
  c.shape(y, "y", x.rows, w.rows);
  c.disjoint(y, "y", x, "x");
  c.disjoint(y, "y", w, "w");
  if (bias) {
    c.f32(*bias, "bias");
    c.shape(*bias, "bias", 1, w.rows);
    c.disjoint(y, "y", *bias, "bias");
  }
  do_linear(x, w, bias, y, accumulate);
}

void Backend::linear_group(const Tensor& x, std::span<const LinearOut> outs) {
  const Contract c(*this, "linear_group");
  c.f32(x, "x");
  for (size_t i = 0; i < outs.size(); ++i) {
    const LinearOut& o = outs[i];
    const Operand w("outs", i, "w"), y("outs", i, "y");
    c.weights(o.w, w);
    c.shape(o.w, w, o.w.rows, x.cols);
    c.f32(o.y, y);
    c.shape(o.y, y, x.rows, o.w.rows);
    c.disjoint(o.y, y, x, "x");
    for (size_t j = 0; j < outs.size(); ++j) {
      c.disjoint(o.y, y, outs[j].w, Operand("outs", j, "w"));
      if (j != i) c.disjoint(o.y, y, outs[j].y, Operand("outs", j, "y"));
    }
  }
  do_linear_group(x, outs);
}

void Backend::rope_table(std::span<const int64_t> positions, int head_dim, float theta,
                         const Tensor& table) {
  const Contract c(*this, "rope_table");
  c.even(head_dim, "head_dim");
  if (!(theta > 0.0f) || std::isinf(theta)) c.fail("theta", "is " + std::to_string(theta));
  for (size_t i = 0; i < positions.size(); ++i)
    if (positions[i] < 0) c.fail(Operand("positions", i, ""), "is " + std::to_string(positions[i]));
  c.f32(table, "table");
  c.shape(table, "table", 2 * static_cast<int64_t>(positions.size()), head_dim / 2);
  do_rope_table(positions, head_dim, theta, table);
}

void Backend::rope(const Tensor& x, int heads, const Tensor& table) {
  const Contract c(*this, "rope");
  c.positive(heads, "heads");
  c.f32(x, "x");
  if (x.cols % heads != 0)
    c.fail("x",
           "is " + describe(x) + ", not a whole number of " + std::to_string(heads) + " heads");
  const int64_t head_dim = x.cols / heads;
  c.even(head_dim, "the head size");
  c.f32(table, "table");
  c.shape(table, "table", 2 * x.rows, head_dim / 2);
  c.disjoint(x, "x", table, "table");
  do_rope(x, heads, table);
}

void Backend::swiglu(const Tensor& gate, const Tensor& up) {
  const Contract c(*this, "swiglu");
  c.f32(gate, "gate");
  c.f32(up, "up");
  c.shape(up, "up", gate.rows, gate.cols);
  c.disjoint(gate, "gate", up, "up");
  do_swiglu(gate, up);
}

void Backend::kv_append(const Tensor& k, const Tensor& v,
                        std::span<const AttentionSegment> segments) {
  const Contract c(*this, "kv_append");
  c.f32(k, "k");
  c.f32(v, "v");
  c.shape(v, "v", k.rows, k.cols);
  c.segments(segments, k.rows, k.cols);
  for (size_t i = 0; i < segments.size(); ++i) {
    const Operand cache_k("segments", i, "k"), cache_v("segments", i, "v");
    for (const auto& [input, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) {
      c.disjoint(segments[i].k, cache_k, *input, name);
      c.disjoint(segments[i].v, cache_v, *input, name);
    }
  }
  do_kv_append(k, v, segments);
}

void Backend::attention(const Tensor& q, const AttentionShape& shape,
                        std::span<const AttentionSegment> segments, const Tensor& out) {
  const Contract c(*this, "attention");
  c.positive(shape.heads, "heads");
  c.positive(shape.kv_heads, "kv_heads");
  if (shape.heads % shape.kv_heads != 0)
    c.fail("heads", "(" + std::to_string(shape.heads) + ") is not a multiple of kv_heads (" +
                        std::to_string(shape.kv_heads) + ")");
  c.even(shape.head_dim, "head_dim");
  c.f32(q, "q");
  c.shape(q, "q", q.rows, shape.q_dim());
  c.f32(out, "out");
  c.shape(out, "out", q.rows, q.cols);
  c.disjoint(out, "out", q, "q");
  c.segments(segments, q.rows, shape.kv_dim());
  for (size_t i = 0; i < segments.size(); ++i) {
    c.disjoint(out, "out", segments[i].k, Operand("segments", i, "k"));
    c.disjoint(out, "out", segments[i].v, Operand("segments", i, "v"));
  }
  do_attention(q, shape, segments, out);
}

void Backend::sample(const Tensor& logits, std::span<const SampleRequest> rows, int32_t* tokens,
                     float* logprobs) {
  const Contract c(*this, "sample");
  c.f32(logits, "logits");
  c.shape(logits, "logits", static_cast<int64_t>(rows.size()), logits.cols);
  if (!rows.empty()) c.positive(logits.cols, "the vocabulary (logits' columns)");
  c.host(tokens, rows.size(), "tokens");
  c.host(logprobs, rows.size(), "logprobs");
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplerConfig* config = rows[i].config;
    if (config == nullptr) c.fail(Operand("rows", i, "config"), "is null");
    for (const LogitBias& entry : config->logit_bias)
      if (entry.token < 0 || entry.token >= logits.cols)
        c.fail(Operand("rows", i, "config"), "biases token " + std::to_string(entry.token) +
                                                 ", outside the vocabulary of " +
                                                 std::to_string(logits.cols));
    if (!config->penalized()) continue;
    const std::span<const int32_t> history = rows[i].history;
    const size_t window = std::min(history.size(), static_cast<size_t>(config->repetition_last_n));
    for (const int32_t token : history.last(window))
      if (token < 0 || token >= logits.cols)
        c.fail(Operand("rows", i, "history"), "holds token " + std::to_string(token) +
                                                  ", outside the vocabulary of " +
                                                  std::to_string(logits.cols));
  }
  do_sample(logits, rows, tokens, logprobs);
  // Alternatives are asked for rarely (an API's top_logprobs): their rows come to the host.
  std::vector<float> row;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].top || rows[i].config->top_logprobs <= 0) continue;
    row.resize(static_cast<size_t>(logits.cols));
    download(row.data(), logits.row(static_cast<int64_t>(i)));
    const int cols = static_cast<int>(logits.cols);
    cpu::top_logprobs(row.data(), cols, std::min(rows[i].config->top_logprobs, cols), *rows[i].top);
  }
}

void Backend::logprobs(const Tensor& logits, std::span<const int32_t> targets, float* out,
                       TopRows top) {
  const Contract c(*this, "logprobs");
  c.f32(logits, "logits");
  c.shape(logits, "logits", static_cast<int64_t>(targets.size()), logits.cols);
  c.host(out, targets.size(), "out");
  c.ids(targets, logits.cols, "targets", "tokens of the vocabulary");
  if (top.k == 0) return do_logprobs(logits, targets, out);
  if (top.k < 0 || top.k > logits.cols)
    c.fail("top.k", "is " + std::to_string(top.k) + ", expected 1 to the vocabulary (" +
                        std::to_string(logits.cols) + ")");
  const auto k = static_cast<size_t>(top.k);
  c.host(top.ids, targets.size() * k, "top.ids");
  c.host(top.logprobs, targets.size() * k, "top.logprobs");
  // Alternatives are asked for rarely (an API's echoed prompt): their rows come to the host, and
  // the target's log-probability is computed there the same way, so that the two agree.
  const int cols = static_cast<int>(logits.cols);
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<TokenLogprob> best;
  for (size_t i = 0; i < targets.size(); ++i) {
    download(row.data(), logits.row(static_cast<int64_t>(i)));
    const double lse = cpu::log_sum_exp(row.data(), cols);
    out[i] = static_cast<float>(row[static_cast<size_t>(targets[i])] - lse);
    cpu::top_logprobs(row.data(), cols, top.k, best);
    for (size_t j = 0; j < k; ++j) {
      top.ids[i * k + j] = best[j].token;
      top.logprobs[i * k + j] = best[j].logprob;
    }
  }
}

}  // namespace photon
