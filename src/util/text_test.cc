#include "util/text.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(ParseDuration, AcceptsUnitsAndCombinations) {
  EXPECT_EQ(parseDuration("500ms")->count(), 500);
  EXPECT_EQ(parseDuration("30s")->count(), 30000);
  EXPECT_EQ(parseDuration("15m")->count(), 900000);
  EXPECT_EQ(parseDuration("2h")->count(), 7200000);
  EXPECT_EQ(parseDuration("1h30m")->count(), 5400000);
  EXPECT_EQ(parseDuration("1.5s")->count(), 1500);
  EXPECT_EQ(parseDuration("10")->count(), 10000);
}

TEST(ParseDuration, RejectsNonsenseWithExamples) {
  for (const char* bad : {"", "abc", "10x", "s", "1h2", "-5s"}) {
    auto d = parseDuration(bad);
    ASSERT_FALSE(d) << bad;
    EXPECT_NE(d.error().message.find("examples"), std::string::npos);
  }
}

TEST(ParseDuration, RefusesWhatWouldOverflowInsteadOfWrapping) {
  for (const char* huge : {"99999999999999999999h", "9223372036854775807", "36501d", "1e400"}) {
    auto d = parseDuration(huge);
    ASSERT_FALSE(d) << huge << " gave " << d->count();
    EXPECT_EQ(d.error().code, Code::kInvalidArgument);
  }
  EXPECT_NE(parseDuration("99999999999999999999h").error().message.find("longer than 36500 days"),
            std::string::npos);
  EXPECT_EQ(parseDuration("36500d")->count(), 36500LL * 86400 * 1000);
  EXPECT_EQ(parseDuration("0s")->count(), 0);
}

TEST(ParseBytes, RefusesWhatDoesNotFitInt64) {
  EXPECT_FALSE(parseBytes("99999999999Ti"));
  EXPECT_FALSE(parseBytes("99999999999999999999"));
  EXPECT_EQ(*parseBytes("1024Ti"), 1LL << 50);
}

TEST(ParseRankList, RanksBeyondTheLargestJobAreRefusedNotEnumerated) {
  auto huge = parseRankList("0-2147483647");
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message.find("ranks go up to 4095"), std::string::npos)
      << huge.error().message;
  EXPECT_EQ(parseRankList("4094-4095")->size(), 2u);
  EXPECT_FALSE(parseRankList("4096"));
}

TEST(ParseInt, SaysWhenANumberIsOutOfRange) {
  EXPECT_EQ(parseInt("99999999999").error().message, "'99999999999' is out of range");
  EXPECT_EQ(parseInt("x").error().message, "'x' is not an integer");
}

TEST(ValidUtf8, AcceptsTextAndRefusesBrokenSequences) {
  EXPECT_TRUE(validUtf8("plain, caf\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80"));
  for (const char* bad : {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\x80"}) {
    EXPECT_FALSE(validUtf8(bad)) << bad;
  }
}

TEST(ParseBytes, BinaryAndDecimalUnits) {
  EXPECT_EQ(*parseBytes("2Gi"), 2147483648LL);
  EXPECT_EQ(*parseBytes("512Mi"), 536870912LL);
  EXPECT_EQ(*parseBytes("1G"), 1000000000LL);
  EXPECT_EQ(*parseBytes("1000"), 1000);
  EXPECT_FALSE(parseBytes("2 GB"));
}

TEST(ParseInt, WholeTextOnlyAndInRange) {
  EXPECT_EQ(*parseInt("-12"), -12);
  EXPECT_EQ(*parseInt64("4294967296"), 4294967296LL);  // a log offset past 4 GiB
  for (const char* bad : {"", "12x", " 1", "1.5", "2147483648"}) {
    auto n = parseInt(bad);
    ASSERT_FALSE(n) << bad;
    EXPECT_EQ(n.error().code, Code::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(parseInt64("9223372036854775808"));
}

TEST(Hex, EncodesBytesAndDrawsRandomOnes) {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff};
  EXPECT_EQ(hexEncode(bytes, sizeof bytes), "000fa5ff");
  auto a = randomHex(32), b = randomHex(32);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos) << *a;
  EXPECT_NE(*a, *b);
}

TEST(ParseRankList, RangesAndAll) {
  EXPECT_TRUE(parseRankList("all")->empty());
  EXPECT_EQ(*parseRankList("0,2-4"), (std::set<int>{0, 2, 3, 4}));
  EXPECT_FALSE(parseRankList("3-1"));
  EXPECT_FALSE(parseRankList("x"));
}

TEST(ShellQuote, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(shellQuote("--lr=0.05"), "--lr=0.05");
  EXPECT_EQ(shellQuote("a b"), "'a b'");
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
}

TEST(IsoTime, FormatsUtcWithMillis) {
  EXPECT_EQ(isoTime(1700000000123000000LL), "2023-11-14T22:13:20.123Z");
}

TEST(Base64, DecodesWithAndWithoutPadding) {
  EXPECT_EQ(*base64Decode("aGVsbG8="), "hello");
  EXPECT_EQ(*base64Decode("aGVsbG8"), "hello");
  EXPECT_EQ(*base64Decode("aGVs\nbG8h"), "hello!");
  EXPECT_FALSE(base64Decode("a"));
  EXPECT_FALSE(base64Decode("a=b"));
}

}  // namespace
}  // namespace cohort
