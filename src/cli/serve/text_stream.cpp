#include "serve/text_stream.h"

#include <algorithm>

namespace photon::serve {

size_t TextStream::first_stop() const {
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    // No stop string begins in the text sent: a possible beginning is held back (safe_end).
    first = std::min(first, generated_.find(stop, sent_));
  }
  return first;
}

size_t TextStream::safe_end() const {
  const size_t stop = first_stop();
  if (stop != std::string::npos) return stop;
  size_t end = generated_.size();
  for (const std::string& s : stops_) {
    // The longest suffix of the text (after what was sent) that is a proper prefix of s.
    const size_t longest = std::min(s.size() - 1, generated_.size() - sent_);
    for (size_t k = longest; k > 0; --k) {
      if (generated_.compare(generated_.size() - k, k, s, 0, k) == 0) {
        end = std::min(end, generated_.size() - k);
        break;
      }
    }
  }
  return end;
}

std::string_view TextStream::append(std::string_view piece) {
  generated_.append(piece);
  if (ended_) return {};
  const size_t stop = first_stop();
  const size_t end = stop != std::string::npos ? stop : safe_end();
  ended_ = stop != std::string::npos;
  const std::string_view out(generated_.data() + sent_, end - sent_);
  sent_ = end;
  return out;
}

std::string_view TextStream::finish() {
  if (ended_) return {};
  ended_ = true;
  const size_t stop = first_stop();
  const size_t end = stop != std::string::npos ? stop : generated_.size();
  const std::string_view out(generated_.data() + sent_, end - sent_);
  sent_ = end;
  return out;
}

}  // namespace photon::serve
