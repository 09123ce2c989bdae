// The text of a completion as it is generated, and how much of it may be sent yet. The engine
// stops once the generated text contains a stop string and still delivers the token that
// completed it; OpenAI's API returns the text before the stop string. So text that could be the
// start of a stop string is held back until the next piece shows it is not, and the reply ends
// where the first stop string begins.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace photon::serve {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends a generated piece; returns the text that may be sent now (possibly empty).
  std::string_view append(std::string_view piece);
  // The generation ended: the text not sent yet, cut where the first stop string begins.
  std::string_view finish();

  // Everything generated (stop strings included).
  const std::string& generated() const { return generated_; }
  // Bytes of the reply sent so far (append's and finish's results, in total).
  size_t sent() const { return sent_; }

 private:
  // Where the first full stop string begins, or npos.
  size_t first_stop() const;
  // How far the text may be sent: before a full stop string, and before a suffix that begins one.
  size_t safe_end() const;

  std::vector<std::string> stops_;
  std::string generated_;
  size_t sent_ = 0;
  bool ended_ = false;  // a stop string was found: nothing after it is ever sent
};

}  // namespace photon::serve
