#include "serving/engine.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"
#include "engine/decode.h"
#include "engine/session_state.h"

namespace photon::serving {

namespace {

constexpr auto kRateWindow = std::chrono::seconds(10);
constexpr const char* kWho = "photon_engine";

double& counter(double* counters, EngineStat stat) {
  return counters[static_cast<int>(stat)];
}

PrefixCache::Key prefix_key(const SessionSettings& s) {
  return {s.mode, s.context, s.kv_type};
}

}  // namespace

// Marks the engine as stepping for the scope; only one thread steps at a time.
struct Engine::StepGuard {
  explicit StepGuard(Engine& e) : engine(e) {}
  ~StepGuard() {
    std::lock_guard<std::mutex> lock(engine.mutex_);
    engine.stepping_ = false;
    engine.work_.notify_all();
  }
  Engine& engine;
};

Engine::Engine(const Model& model, const EngineOptions& options)
    : model_(model), options_(options), prefix_cache_(options.prefix_cache) {
  // Admission then never allocates to record a running request (it could not be undone).
  running_.reserve(static_cast<size_t>(std::min(options.max_running, 4096)));
}

Engine::~Engine() {
  bool worker = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    worker = worker_running_;
  }
  if (worker) stop(false);
  // Finished outside the lock: their finish callbacks run on this thread.
  std::vector<std::shared_ptr<Request>> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* queue : {&waiting_, &paused_}) left.insert(left.end(), queue->begin(), queue->end());
    left.insert(left.end(), running_.begin(), running_.end());
  }
  for (auto& r : left) {
    r->session.reset();
    r->finish(PHOTON_STOP_CANCELLED);
  }
}

std::shared_ptr<Request> Engine::submit(RequestSpec spec) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (waiting_.size() >= static_cast<size_t>(options_.max_waiting)) {
    ++counter(counters_, EngineStat::Refused);
    fail(PHOTON_ERR_BUSY, std::string("photon_engine_submit: ") + std::to_string(waiting_.size()) +
                              " requests wait already (max_waiting); submit again later");
  }
  auto request = std::make_shared<Request>(std::move(spec));
  request->seq = next_seq_++;
  waiting_.push_back(request);
  ++counter(counters_, EngineStat::Submitted);
  work_.notify_all();
  return request;
}

void Engine::wake() {
  std::lock_guard<std::mutex> lock(mutex_);
  work_.notify_all();
}

void Engine::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (worker_running_ || stepping_)
    fail(PHOTON_ERR_INVALID_ARGUMENT,
         "photon_engine_start: the engine's worker runs already, or a thread is in a step");
  stop_requested_ = false;
  try {
    worker_ = std::thread([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    fail(PHOTON_ERR_INTERNAL, std::string("photon_engine_start: no thread: ") + e.what());
  }
  worker_running_ = true;
}

void Engine::stop(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!worker_running_)
      fail(PHOTON_ERR_INVALID_ARGUMENT, "photon_engine_stop: the engine's worker does not run");
    stop_requested_ = true;
    stop_drains_ = drain;
    if (!drain) {
      for (auto& r : waiting_) r->cancel();
      for (auto& r : running_) r->cancel();
      for (auto& r : paused_) r->cancel();
    }
    work_.notify_all();
  }
  worker_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  worker_running_ = false;
  stop_requested_ = false;
}

int32_t Engine::step() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (worker_running_ || stepping_)
      fail(PHOTON_ERR_INVALID_ARGUMENT,
           "photon_engine_step: the engine's worker runs, or another thread is in a step");
    stepping_ = true;
  }
  StepGuard guard(*this);
  return run_step();
}

void Engine::worker_loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [&] { return stop_requested_ || has_work_locked(); });
      if (stop_requested_ && unfinished_locked() == 0) return;
      stepping_ = true;
    }
    StepGuard guard(*this);
    run_step();
  }
}

bool Engine::has_work_locked() const {
  return !waiting_.empty() || !running_.empty() || !paused_.empty();
}

int32_t Engine::unfinished_locked() const {
  return static_cast<int32_t>(waiting_.size() + running_.size() + paused_.size());
}

int32_t Engine::run_step() {
  const int64_t generated_before = static_cast<int64_t>(stat(EngineStat::GeneratedTokens));
  end_cancelled();
  admit();
  std::vector<int64_t> plan = plan_step();
  make_room(plan);
  prefill_prompts(plan);
  decode();
  retire();
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point now = Clock::now();
  const int64_t generated =
      static_cast<int64_t>(counter(counters_, EngineStat::GeneratedTokens)) - generated_before;
  if (generated > 0) recent_tokens_.emplace_back(now, generated);
  while (!recent_tokens_.empty() && now - recent_tokens_.front().first > kRateWindow)
    recent_tokens_.pop_front();
  ++counter(counters_, EngineStat::Steps);
  return unfinished_locked();
}

void Engine::end_request(Request& r, photon_stop_reason reason) {
  if (reason == PHOTON_STOP_CANCELLED) r.session.reset();  // its memory returns now
  r.finish(reason);
  std::lock_guard<std::mutex> lock(mutex_);
  ++counter(counters_, EngineStat::Finished);
  if (reason == PHOTON_STOP_CANCELLED) ++counter(counters_, EngineStat::Cancelled);
}

void Engine::fail_request(Request& r, photon_status status, const std::string& message) {
  r.finish(PHOTON_STOP_ERROR, status, message);
  std::lock_guard<std::mutex> lock(mutex_);
  ++counter(counters_, EngineStat::Finished);
  ++counter(counters_, EngineStat::Failed);
}

void Engine::end_cancelled() {
  std::vector<std::shared_ptr<Request>> ended;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* queue : {&waiting_, &paused_}) {
      auto keep = std::stable_partition(queue->begin(), queue->end(),
                                        [](const auto& r) { return !r->cancel_requested(); });
      ended.insert(ended.end(), keep, queue->end());
      queue->erase(keep, queue->end());
    }
  }
  for (auto& r : ended) end_request(*r, PHOTON_STOP_CANCELLED);
  for (auto& r : running_)
    if (r->cancel_requested() && r->state() != RequestState::Finished)
      end_request(*r, PHOTON_STOP_CANCELLED);
}

uint64_t Engine::measure_memory() const {
  return model_.backend().memory(false).in_use;
}

bool Engine::admit_one(Request& r) {
  RequestSpec& spec = r.spec();
  const uint64_t before = measure_memory();
  const bool paused = !r.saved.empty();
  const bool lent = spec.session != nullptr;
  const bool fresh = !lent && spec.state.empty();
  std::unique_ptr<Session> session;
  size_t cached = 0;  // prompt tokens restored from the prefix cache
  try {
    const PrefixCache::Entry* hit = nullptr;
    if (!paused && fresh && prefix_cache_.enabled())
      hit = prefix_cache_.find(prefix_key(spec.settings), spec.prompt);
    if (paused) {
      session = restore_session(model_, r.saved);
      if (r.resume_whole_context) session->reserve_context();
    } else if (lent) {
      session = std::move(spec.session);
    } else if (!spec.state.empty()) {
      session = restore_session(model_, spec.state);
    } else if (hit) {
      session = restore_session(model_, hit->state);
      session->set_sampler(spec.settings.sampler, kWho);
      cached = hit->tokens.size();
    } else {
      session = Session::create(model_, spec.settings.mode, spec.settings.context,
                                spec.settings.sampler, spec.settings.kv_type);
    }
    if (!paused && (spec.sampler_given || fresh))
      session->context_shift = spec.settings.context_shift;
    if (!paused) {
      if (spec.sampler_given && !fresh) session->set_sampler(spec.settings.sampler, kWho);
      session->check_prefill(std::span<const int32_t>(spec.prompt).subspan(cached),
                             "photon_engine_submit: the request's prompt");
      if (session->history.empty() && spec.prompt.empty())
        fail(PHOTON_ERR_INVALID_ARGUMENT,
             "photon_engine_submit: the request holds no tokens (give a prompt, a state or a "
             "session)");
    }
  } catch (const Error& e) {
    fail_request(r, e.status(), e.what());
    return true;
  } catch (const std::bad_alloc&) {
    fail_request(r, PHOTON_ERR_OUT_OF_MEMORY, "photon_engine: out of memory admitting a request");
    return true;
  }
  const uint64_t after = measure_memory();
  r.bytes = after > before ? after - before : 0;
  if (options_.memory_budget > 0 && r.bytes > options_.memory_budget) {
    fail_request(r, PHOTON_ERR_OUT_OF_MEMORY,
                 "photon_engine: the request needs " + std::to_string(r.bytes) +
                     " bytes, more than the engine's whole memory budget of " +
                     std::to_string(options_.memory_budget));
    return true;
  }
  if (options_.memory_budget > 0 && memory_in_use_ + r.bytes > options_.memory_budget) {
    // It waits for room; a lent session is kept, anything else is made again from the spec.
    if (lent) spec.session = std::move(session);
    return false;
  }
  // Tokens the request continues instead of reading: a given session's or state's, or a cached
  // prompt's.
  const int64_t reused = paused  ? 0
                         : fresh ? static_cast<int64_t>(cached)
                                 : static_cast<int64_t>(session->history.size());
  if (reused > 0) r.count_reused(reused);
  if (!paused) {
    r.fresh = fresh;
    r.prompt_done = cached;
  }
  r.saved.clear();
  r.fixed_bytes = r.bytes - std::min(r.bytes, session->cache_bytes());
  r.session = std::move(session);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_in_use_ += r.bytes;
    memory_peak_ = std::max(memory_peak_, memory_in_use_);
    counter(counters_, EngineStat::ReusedTokens) += static_cast<double>(reused);
    if (cached > 0) ++counter(counters_, EngineStat::PrefixHits);
  }
  r.set_state(RequestState::Running);
  return true;
}

void Engine::admit() {
  for (;;) {
    std::shared_ptr<Request> next;
    bool from_paused = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (running_.size() >= static_cast<size_t>(options_.max_running)) return;
      if (!paused_.empty()) {
        next = paused_.front();
        from_paused = true;
      } else if (!waiting_.empty()) {
        next = waiting_.front();
      } else {
        return;
      }
      // A request that did not fit before waits until enough memory was freed.
      if (options_.memory_budget > 0 && next->bytes > 0 &&
          memory_in_use_ + next->bytes > options_.memory_budget)
        return;
      // One that would read again what a running request is reading waits for its save.
      if (!from_paused && awaits_prefix_locked(*next)) return;
    }
    const bool done = admit_one(*next);
    if (!done) return;
    std::lock_guard<std::mutex> lock(mutex_);
    (from_paused ? paused_ : waiting_).pop_front();
    if (next->state() == RequestState::Running) running_.push_back(next);
  }
}

bool Engine::awaits_prefix_locked(Request& r) {
  RequestSpec& spec = r.spec();
  if (!prefix_cache_.enabled() || spec.session || !spec.state.empty()) return false;
  const PrefixCache::Key key = prefix_key(spec.settings);
  for (const auto& running : running_) {
    const RequestSpec& other = running->spec();
    if (!running->fresh || running->prompt_done >= other.prompt.size() ||
        running->state() != RequestState::Running || !(prefix_key(other.settings) == key) ||
        other.prompt.size() > spec.prompt.size() ||
        (!PrefixCache::extends(key) && other.prompt.size() < spec.prompt.size()))
      continue;
    if (std::equal(other.prompt.begin(), other.prompt.end(), spec.prompt.begin())) return true;
  }
  return false;
}

std::vector<int64_t> Engine::plan_step() const {
  std::vector<int64_t> plan(running_.size(), 0);
  int64_t budget = options_.step_tokens;
  for (size_t i = 0; i < running_.size(); ++i) {
    Request& r = *running_[i];
    if (r.state() != RequestState::Running) continue;
    const int64_t left = static_cast<int64_t>(r.spec().prompt.size() - r.prompt_done);
    // A prompt its mode would encode whole again at every piece (RecGen) is read in one step,
    // begun while the step has any budget left.
    const bool whole = left > 0 && r.session->runner->rereads_history(*r.session);
    const int64_t chunk = whole ? (budget > 0 ? left : 0) : std::min(budget, left);
    budget = std::max<int64_t>(budget - chunk, 0);
    // A prompt read to its end decodes in the same step.
    plan[i] = chunk + (chunk == left ? 1 : 0);
  }
  return plan;
}

void Engine::make_room(std::vector<int64_t>& plan) {
  if (options_.memory_budget == 0) return;
  for (;;) {
    uint64_t need = 0;
    Request* newest = nullptr;
    size_t running = 0;
    for (size_t i = 0; i < running_.size(); ++i) {
      Request* r = running_[i].get();
      if (r->state() != RequestState::Running) continue;
      need += r->session->growth_bytes(plan[i]);
      ++running;
      if (!newest || r->seq > newest->seq) newest = r;
    }
    if (memory_in_use_ + need <= options_.memory_budget) return;
    // The step does not fit: the newest running request (the last submitted) waits, saved.
    if (running == 1) {
      fail_request(*newest, PHOTON_ERR_OUT_OF_MEMORY,
                   "photon_engine: the request needs " + std::to_string(newest->bytes + need) +
                       " bytes to go on, more than the engine's memory budget of " +
                       std::to_string(options_.memory_budget));
      return;
    }
    pause(*newest);
    plan = plan_step();
  }
}

void Engine::pause(Request& r) {
  try {
    r.saved = save_session(*r.session, kWho);
  } catch (const Error& e) {
    fail_request(r, e.status(), e.what());
    return;
  } catch (const std::bad_alloc&) {
    fail_request(r, PHOTON_ERR_OUT_OF_MEMORY, "photon_engine: out of memory pausing a request");
    return;
  }
  r.resume_whole_context = r.session->whole_context;
  r.session.reset();
  r.set_state(RequestState::Paused);
  std::lock_guard<std::mutex> lock(mutex_);
  memory_in_use_ -= r.bytes;
  ++counter(counters_, EngineStat::Pauses);
  const auto it =
      std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &r; });
  // Paused requests resume oldest first.
  const auto at =
      std::find_if(paused_.begin(), paused_.end(), [&](const auto& p) { return p->seq > r.seq; });
  paused_.insert(at, *it);
  running_.erase(it);
}

void Engine::prefill_prompts(const std::vector<int64_t>& plan) {
  std::vector<Request*> group;
  std::vector<Session*> sessions;
  std::vector<std::span<const int32_t>> slices;
  for (size_t i = 0; i < running_.size(); ++i) {
    Request* r = running_[i].get();
    if (r->state() != RequestState::Running) continue;
    const std::vector<int32_t>& prompt = r->spec().prompt;
    const size_t n = std::min(static_cast<size_t>(plan[i]), prompt.size() - r->prompt_done);
    if (n == 0) continue;
    group.push_back(r);
    sessions.push_back(r->session.get());
    slices.push_back(std::span<const int32_t>(prompt).subspan(r->prompt_done, n));
  }
  if (group.empty()) return;
  try {
    photon::prefill_batch(sessions, slices, kWho, RunnerScratch::Call);
  } catch (const Error& e) {
    for (Request* r : group) fail_request(*r, e.status(), e.what());
    return;
  } catch (const std::bad_alloc&) {
    for (Request* r : group)
      fail_request(*r, PHOTON_ERR_OUT_OF_MEMORY, "photon_engine: out of memory in a prefill");
    return;
  }
  int64_t consumed = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    group[i]->prompt_done += slices[i].size();
    group[i]->count_prompt(static_cast<int64_t>(slices[i].size()));
    consumed += static_cast<int64_t>(slices[i].size());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counter(counters_, EngineStat::PromptTokens) += static_cast<double>(consumed);
  }
  if (prefix_cache_.enabled()) save_prompts(group);
}

void Engine::save_prompts(const std::vector<Request*>& group) {
  for (Request* r : group) {
    const std::vector<int32_t>& prompt = r->spec().prompt;
    if (!r->fresh || r->prompt_done < prompt.size() || r->state() != RequestState::Running)
      continue;
    // The cache is an optimisation: a save that fails leaves the request as it was.
    try {
      prefix_cache_.insert(prefix_key(r->spec().settings), prompt, save_session(*r->session, kWho));
    } catch (const Error&) {
    } catch (const std::bad_alloc&) {
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  counter(counters_, EngineStat::PrefixBytes) = static_cast<double>(prefix_cache_.bytes());
}

void Engine::decode() {
  std::vector<Request*> group;
  std::vector<Session*> sessions;
  std::vector<TokenSink> sinks;
  for (auto& r : running_) {
    if (r->state() != RequestState::Running) continue;
    if (r->prompt_done < r->spec().prompt.size()) continue;
    const int32_t max_tokens = r->spec().max_tokens;
    if (max_tokens >= 0 && r->stats().generated_tokens >= max_tokens) {
      end_request(*r, PHOTON_STOP_LENGTH);
      continue;
    }
    group.push_back(r.get());
    sessions.push_back(r->session.get());
    Request* request = r.get();
    sinks.emplace_back([request](const DeliveredToken& token) { return request->deliver(token); });
  }
  if (group.empty()) return;
  std::vector<int32_t> delivered;
  try {
    delivered = photon::generate(sessions, 1, sinks, kWho, true, RunnerScratch::Call);
  } catch (const Error& e) {
    for (Request* r : group) fail_request(*r, e.status(), e.what());
    return;
  } catch (const std::bad_alloc&) {
    for (Request* r : group)
      fail_request(*r, PHOTON_ERR_OUT_OF_MEMORY, "photon_engine: out of memory in a decode step");
    return;
  }
  int64_t total = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    Request& r = *group[i];
    total += delivered[i];
    const photon_stop_reason reason = r.session->stream.stop_reason;
    const int32_t max_tokens = r.spec().max_tokens;
    if (r.cancel_requested())
      end_request(r, PHOTON_STOP_CANCELLED);
    else if (reason != PHOTON_STOP_LENGTH)
      end_request(r, reason);
    else if (max_tokens >= 0 && r.stats().generated_tokens >= max_tokens)
      end_request(r, PHOTON_STOP_LENGTH);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  counter(counters_, EngineStat::GeneratedTokens) += static_cast<double>(total);
}

void Engine::retire() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto gone = std::stable_partition(running_.begin(), running_.end(), [](const auto& r) {
    return r->state() != RequestState::Finished;
  });
  for (auto it = gone; it != running_.end(); ++it) memory_in_use_ -= (*it)->bytes;
  running_.erase(gone, running_.end());
  // The running sessions' caches grew in the step.
  for (auto& r : running_) {
    const uint64_t bytes = r->fixed_bytes + r->session->cache_bytes();
    memory_in_use_ += bytes - r->bytes;
    r->bytes = bytes;
  }
  memory_peak_ = std::max(memory_peak_, memory_in_use_);
}

double Engine::stat(EngineStat s) const {
  std::lock_guard<std::mutex> lock(mutex_);
  switch (s) {
    case EngineStat::Waiting: return static_cast<double>(waiting_.size());
    case EngineStat::Running: return static_cast<double>(running_.size());
    case EngineStat::Paused: return static_cast<double>(paused_.size());
    case EngineStat::MemoryInUse: return static_cast<double>(memory_in_use_);
    case EngineStat::MemoryPeak: return static_cast<double>(memory_peak_);
    case EngineStat::TokensPerSecond: {
      if (recent_tokens_.empty()) return 0.0;
      const Clock::time_point now = Clock::now();
      double tokens = 0;
      for (const auto& [when, n] : recent_tokens_) tokens += static_cast<double>(n);
      const double span = std::chrono::duration<double>(now - recent_tokens_.front().first).count();
      return tokens / std::max(span, 1.0);
    }
    default: return counters_[static_cast<int>(s)];
  }
}

}  // namespace photon::serving
