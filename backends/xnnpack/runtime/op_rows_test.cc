// The C++ op rows (op_rows.inc) and the OpKind enum of xnnpack_graph.fbs agree.

#include "edgeshare/backends/xnnpack/runtime/op_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

namespace edgeshare {
namespace xnnpack {
namespace {

TEST(OpRows, every_enum_kind_has_exactly_one_row_named_after_it) {
  for (schema::OpKind kind : schema::EnumValuesOpKind()) {
    size_t rows = 0;
    for (const OpRow& row : op_rows()) rows += row.kind == kind ? 1 : 0;
    EXPECT_EQ(rows, 1u) << schema::EnumNameOpKind(kind);
    const OpRow* row = find_op_row(static_cast<uint8_t>(kind));
    ASSERT_NE(row, nullptr) << schema::EnumNameOpKind(kind);
    EXPECT_STREQ(row->name, schema::EnumNameOpKind(kind));
  }
}

TEST(OpRows, no_row_exists_for_a_kind_outside_the_enum) {
  std::set<int> kinds;
  for (schema::OpKind kind : schema::EnumValuesOpKind()) kinds.insert(kind);
  for (const OpRow& row : op_rows()) {
    EXPECT_EQ(kinds.count(row.kind), 1u) << row.name << " = " << static_cast<int>(row.kind);
  }
  EXPECT_EQ(op_rows().size(), kinds.size());
  EXPECT_EQ(find_op_row(schema::OpKind_MAX + 1), nullptr);
  EXPECT_EQ(find_op_row(255), nullptr);
}

TEST(OpRows, arities_fit_a_node) {
  for (const OpRow& row : op_rows()) {
    EXPECT_GE(row.min_inputs, 1u) << row.name;
    EXPECT_LE(row.min_inputs, row.max_inputs) << row.name;
    EXPECT_LE(row.max_inputs, kMaxNodeInputs) << row.name;
    EXPECT_NE(row.check_shapes, nullptr) << row.name;
    EXPECT_NE(row.build, nullptr) << row.name;
  }
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
