// sha256() agrees with the FIPS 180-2 test vectors, and check_sha256() tells matching bytes from
// changed ones with a message that shows both digests.

#include "edgeshare/runtime/core/sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace edgeshare {
namespace runtime {
namespace {

Digest from_hex(const char* hex) {
  Digest d;
  for (size_t i = 0; i < d.bytes.size(); ++i) {
    d.bytes[i] = static_cast<uint8_t>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
  }
  return d;
}

TEST(Sha256Test, matches_the_standard_test_vectors) {
  auto empty = sha256(nullptr, 0);
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(*empty, from_hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  auto abc = sha256("abc", 3);
  ASSERT_TRUE(abc.ok());
  EXPECT_EQ(*abc, from_hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  auto two = sha256(two_blocks.data(), two_blocks.size());
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, from_hex("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  const std::vector<char> million(1000000, 'a');
  auto m = sha256(million.data(), million.size());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, from_hex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

TEST(Sha256Test, check_accepts_the_recorded_digest_and_names_both_on_a_mismatch) {
  std::vector<uint8_t> bytes(4096);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  auto recorded = sha256(bytes.data(), bytes.size());
  ASSERT_TRUE(recorded.ok());
  EXPECT_TRUE(check_sha256(bytes.data(), bytes.size(), *recorded).ok());

  bytes[1234] ^= 0x01;  // One bit.
  Status changed = check_sha256(bytes.data(), bytes.size(), *recorded);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.code(), Error::InvalidData);
  const std::string message = changed.message();
  EXPECT_NE(message.find("4096 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("d010f6d76d0eb4dc"), std::string::npos) << message;  // Recorded, hashlib.
}

TEST(Sha256Test, null_data_with_a_size_is_an_error) {
  auto r = sha256(nullptr, 16);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Error::InvalidArgument);
}

TEST(Sha256Test, threads_hash_at_once) {
  const std::vector<char> data(1 << 20, 'x');
  auto want = sha256(data.data(), data.size());
  ASSERT_TRUE(want.ok());
  std::vector<Digest> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] { got[t] = *sha256(data.data(), data.size()); });
  }
  for (std::thread& t : threads) t.join();
  for (const Digest& d : got) EXPECT_EQ(d, *want);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
