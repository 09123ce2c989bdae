// nlohmann::json for the library's own files. The library is compiled with hidden visibility, and
// its instantiations of nlohmann's templates would be hidden too; declared here with default
// visibility, they keep their names in the test executables that link the library's objects
// (the failure-injection hook recognises nlohmann's frames by name, since nlohmann allocates in a
// noexcept destructor), while libphoton's version script still keeps them out of its exports.
#pragma once

#pragma GCC visibility push(default)
#include <nlohmann/json.hpp>
#pragma GCC visibility pop
