// The fields of a FlatBuffers schema of schemas/, read from its text: the tests that must cover
// every field (damaged inputs, the saved-session property test) fail when one is added without a
// case of its own.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>

namespace photon::testing {

// prefix + "Table.field" for every field of a schema's tables but the deprecated ones.
inline std::set<std::string> schema_fields(const std::string& schema, const std::string& prefix) {
  std::ifstream in(std::string(PHOTON_SOURCE_DIR) + "/schemas/" + schema);
  EXPECT_TRUE(in) << schema;
  const std::regex table_start(R"(^\s*table\s+(\w+))"), field(R"(^\s*(\w+)\s*:)");
  std::set<std::string> fields;
  std::string table, line;
  std::smatch m;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find("//"));  // a comment may hold braces
    if (std::regex_search(line, m, table_start))
      table = m[1];
    else if (line.find('}') != std::string::npos)
      table.clear();
    else if (!table.empty() && std::regex_search(line, m, field) &&
             line.find("(deprecated)") == std::string::npos)
      fields.insert(prefix + table + "." + m[1].str());
  }
  return fields;
}

}  // namespace photon::testing
