// JSON text written by hand on the streaming hot path (one chunk per token), where building a
// document object for each token would cost more than the token.
#pragma once

#include <string>
#include <string_view>

namespace photon::serve {

// Appends `text` as a JSON string (quotes included). Bytes that are not valid UTF-8 become U+FFFD,
// so the output is always valid JSON.
void append_json_string(std::string& out, std::string_view text);

// A float as JSON (NaN and infinities, which JSON lacks, as null): 9 significant digits, which
// read back as the same float.
void append_json_number(std::string& out, double value);

// The number append_json_number writes, as a double, for JSON built as a document: a value written
// either way reads back the same (clients compare a token's logprob with its alternatives').
double json_number_value(double value);

}  // namespace photon::serve
