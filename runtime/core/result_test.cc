#include "edgeshare/runtime/core/result.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace edgeshare {
namespace runtime {
namespace {

Result<int> Half(int x) {
  ES_CHECK_OR_RETURN_ERROR(x % 2 == 0, Error::InvalidArgument, "%d is odd", x);
  return x / 2;
}

Result<int> Quarter(int x) {
  ES_ASSIGN_OR_RETURN(int half, Half(x));
  ES_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status CheckQuarter(int x) {
  ES_RETURN_IF_ERROR(Quarter(x));
  return Status();
}

TEST(ResultTest, ValueFlowsThrough) {
  Result<int> r = Quarter(8);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2);
  EXPECT_EQ(r.error(), Error::Ok);
  EXPECT_STREQ(r.status().message(), "");
}

TEST(ResultTest, ErrorCarriesCodeAndMessageToTheCaller) {
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), Error::InvalidArgument);
  EXPECT_STREQ(r.status().message(), "3 is odd");
  Status s = CheckQuarter(5);
  EXPECT_EQ(s.code(), Error::InvalidArgument);
  EXPECT_STREQ(s.message(), "5 is odd");
}

TEST(ResultTest, ResultFromOkStatusIsAnInternalError) {
  Result<int> r{Status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error(), Error::Internal);
}

TEST(StatusTest, CodeOnlyStatusNamesItsCode) {
  Status s(Error::NotFound);
  EXPECT_STREQ(s.message(), "NotFound");
  EXPECT_STREQ(to_string(Error::InvalidProgram), "InvalidProgram");
}

TEST(StatusTest, CopiesAndMovesKeepTheMessage) {
  Status a = Status::Format(Error::OutOfRange, "offset %d past %d", 10, 4);
  Status b = a;
  Status c = std::move(a);
  EXPECT_TRUE(a.ok());  // NOLINT: moved-from is ok by contract.
  EXPECT_STREQ(b.message(), "offset 10 past 4");
  EXPECT_STREQ(c.message(), "offset 10 past 4");
  b = c;
  EXPECT_STREQ(b.message(), "offset 10 past 4");
}

TEST(StatusTest, WithContextPrefixesTheMessage) {
  Status s = Status::Format(Error::NotFound, "key 'w' missing").WithContext("loading %s", "a.pte");
  EXPECT_EQ(s.code(), Error::NotFound);
  EXPECT_STREQ(s.message(), "loading a.pte: key 'w' missing");
  EXPECT_TRUE(Status().WithContext("x").ok());
}

TEST(StatusTest, LongMessagesAreTruncatedNotOverflowed) {
  std::string long_key(2000, 'k');
  Status s = Status::Format(Error::NotFound, "key '%s' missing", long_key.c_str());
  EXPECT_LT(std::strlen(s.message()), 512u);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
