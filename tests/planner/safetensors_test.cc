// Tests of the safetensors header parser (planner/safetensors.h) on hand-built headers and files.
// Every validation rule has its own test; error messages must name the file, the tensor and the
// byte offset. The writer below is written here, independently of tools/ and planner/.
#include "planner/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "planner/checkpoint.h"
#include "planner/dtype.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;

constexpr char kLabel[] = "shard-7.safetensors";

// Independent table: safetensors dtype names and element sizes, from the format's spec.
const std::vector<std::pair<std::string, std::uint64_t>> kSpecDTypes = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

std::string ShapeJson(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// One tensor entry's JSON, with whatever (possibly wrong) values the test wants.
std::string Entry(const std::string& dtype, const std::vector<std::uint64_t>& shape,
                  std::uint64_t begin, std::uint64_t end) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + ShapeJson(shape) + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// {"name": <raw JSON>, ...} in the order given.
std::string Header(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string s = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    s += (i ? "," : "") + ("\"" + items[i].first + "\":") + items[i].second;
  }
  return s + "}";
}

std::string LengthPrefix(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// Deterministic, never-zero data bytes.
std::string DataBytes(std::uint64_t n, std::uint64_t seed = 1) {
  std::string s(n, '\0');
  for (std::uint64_t i = 0; i < n; ++i) s[i] = static_cast<char>(1 + (i * 131 + seed * 17) % 251);
  return s;
}

std::string FileBytes(const std::string& header, std::uint64_t data_bytes) {
  return LengthPrefix(header.size()) + header + DataBytes(data_bytes);
}

// Parses `header` as the JSON of a file with `data_bytes` bytes of data.
Result<SafetensorsHeader> Parse(const std::string& header, std::uint64_t data_bytes) {
  return ParseSafetensorsHeader(kLabel, header, 8 + header.size() + data_bytes);
}

// Asserts a Corrupt error whose message holds every string in `parts`.
void ExpectCorrupt(const Result<SafetensorsHeader>& r, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.ok()) << "expected an error mentioning " << parts.front();
  EXPECT_EQ(r.status().code(), Code::kCorrupt) << r.status().ToString();
  EXPECT_NE(r.status().message().find(kLabel), std::string::npos) << r.status().ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "missing '" << p << "' in: " << r.status().ToString();
  }
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "hoist-st-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// ---- dtypes ---------------------------------------------------------------------------------

TEST(DType, AllFifteenSafetensorsNamesRoundTripWithTheirSizes) {
  for (const auto& [name, size] : kSpecDTypes) {
    const std::optional<DType> d = ParseDType(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(DTypeName(*d), name);
    EXPECT_EQ(DTypeSize(*d), size) << name;
  }
  EXPECT_FALSE(ParseDType("bf16").has_value());
  EXPECT_FALSE(ParseDType("F4").has_value());
  EXPECT_FALSE(ParseDType("").has_value());
}

// ---- happy paths ----------------------------------------------------------------------------

TEST(SafetensorsHeader, EveryDtypeWithMetadataSortedByBegin) {
  // One tensor per dtype, with shapes of rank 0..3; offsets laid out in spec order, but the JSON
  // lists the tensors in reverse so the parser has to sort them.
  struct Expect {
    std::string name, dtype;
    std::vector<std::uint64_t> shape;
    std::uint64_t begin, end;
  };
  std::vector<Expect> expected;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < kSpecDTypes.size(); ++i) {
    std::vector<std::uint64_t> shape;
    for (std::size_t d = 0; d < i % 4; ++d) shape.push_back(2 + (i + d) % 3);
    std::uint64_t elems = 1;
    for (auto s : shape) elems *= s;
    const std::uint64_t bytes = elems * kSpecDTypes[i].second;
    expected.push_back(
        {"t" + std::to_string(100 - i), kSpecDTypes[i].first, shape, offset, offset + bytes});
    offset += bytes;
  }
  std::vector<std::pair<std::string, std::string>> items;
  items.emplace_back("__metadata__", R"({"format":"pt","note":"hello"})");
  for (auto it = expected.rbegin(); it != expected.rend(); ++it) {
    items.emplace_back(it->name, Entry(it->dtype, it->shape, it->begin, it->end));
  }
  const std::string header = Header(items);
  const std::string file = FileBytes(header, offset);

  Result<SafetensorsHeader> r = ParseSafetensorsPrefix(kLabel, file, file.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->header_len, header.size());
  EXPECT_EQ(r->data_start, 8 + header.size());
  EXPECT_EQ(r->metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hello"}}));
  ASSERT_EQ(r->tensors.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const TensorEntry& t = r->tensors[i];
    EXPECT_EQ(t.name, expected[i].name);
    EXPECT_EQ(DTypeName(t.dtype), expected[i].dtype);
    EXPECT_EQ(t.shape, expected[i].shape);
    EXPECT_EQ(t.begin, expected[i].begin);
    EXPECT_EQ(t.end, expected[i].end);
    EXPECT_EQ(t.bytes(), expected[i].end - expected[i].begin);
  }
}

TEST(SafetensorsHeader, ZeroSizeTensorAndScalarAreLegal) {
  // "empty" [0, 4] sits between two tensors at the same offset as the next one begins.
  const std::string header = Header({{"a", Entry("F32", {2}, 0, 8)},
                                     {"empty", Entry("BF16", {0, 4}, 8, 8)},
                                     {"scalar", Entry("I64", {}, 8, 16)}});
  Result<SafetensorsHeader> r = Parse(header, 16);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors.size(), 3u);
  EXPECT_EQ(r->tensors[0].name, "a");
  EXPECT_EQ(r->tensors[1].name, "empty");
  EXPECT_EQ(r->tensors[1].bytes(), 0u);
  EXPECT_EQ(r->tensors[2].name, "scalar");
  EXPECT_TRUE(r->tensors[2].shape.empty());
}

TEST(SafetensorsHeader, SpacePaddedHeaderAndNullMetadataAreAccepted) {
  // The reference writer pads the header with spaces to an 8-byte multiple.
  const std::string header =
      Header({{"__metadata__", "null"}, {"w", Entry("U8", {3}, 0, 3)}}) + std::string(5, ' ');
  Result<SafetensorsHeader> r = Parse(header, 3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->header_len, header.size());
  EXPECT_TRUE(r->metadata.empty());
  ASSERT_EQ(r->tensors.size(), 1u);
  EXPECT_EQ(r->tensors[0].shape, std::vector<std::uint64_t>{3});
}

// nlohmann's lexer stops at a NUL byte: valid JSON, a NUL, then garbage must not parse.
TEST(SafetensorsHeader, TextAfterANulIsRejectedWithItsOffset) {
  const std::string json = Header({{"w", Entry("U8", {3}, 0, 3)}});
  const std::string header = json + std::string(1, '\0') + "garbage";
  Result<SafetensorsHeader> r = Parse(header, 3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_NE(r.status().message().find("at byte " + std::to_string(8 + json.size())),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("NUL byte"), std::string::npos) << r.status().message();
  // The same for config.json.
  Result<ModelConfig> c = ParseModelConfig(
      "config.json",
      std::string(R"({"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
                      "vocab_size": 100})") +
          std::string(1, '\0') + "{");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("config.json: invalid JSON at byte"), std::string::npos)
      << c.status().message();
}

TEST(SafetensorsHeader, EmptyObjectWithEmptyDataSectionIsLegal) {
  Result<SafetensorsHeader> r = Parse("{}", 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->tensors.empty());
}

TEST(SafetensorsHeader, LargeHeaderParsesInLinearTime) {
  // 50,000 tensors (a 5 MB header). A parser that rescans the object per entry (nlohmann's
  // callback mode does) takes tens of seconds here; a linear one well under a second.
  constexpr std::uint64_t kCount = 50000;
  std::vector<std::pair<std::string, std::string>> items;
  for (std::uint64_t i = 0; i < kCount; ++i) {
    // Listed from the last offset to the first; names sort differently from offsets.
    const std::uint64_t slot = kCount - 1 - i;
    items.emplace_back("model.layers." + std::to_string(i % 61) + ".t" + std::to_string(i),
                       Entry("BF16", {3}, slot * 6, slot * 6 + 6));
  }
  const std::string header = Header(items);
  const auto start = std::chrono::steady_clock::now();
  Result<SafetensorsHeader> r = Parse(header, kCount * 6);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors.size(), kCount);
  for (std::uint64_t slot = 0; slot < kCount; ++slot) {
    ASSERT_EQ(r->tensors[slot].begin, slot * 6);
    ASSERT_EQ(r->tensors[slot].name, items[kCount - 1 - slot].first);
  }
  EXPECT_LT(seconds, 5.0);
}

// ---- header length --------------------------------------------------------------------------

TEST(SafetensorsHeader, HeaderLengthLargerThanFileIsRejected) {
  const std::string header = Header({{"w", Entry("U8", {4}, 0, 4)}});
  std::string file = FileBytes(header, 4);
  const std::uint64_t claimed = file.size();  // 8 more than fits
  file.replace(0, 8, LengthPrefix(claimed));
  ExpectCorrupt(ParseSafetensorsPrefix(kLabel, file, file.size()),
                {"header length " + std::to_string(claimed), "file offset 0",
                 std::to_string(file.size()) + "-byte file"});
}

TEST(SafetensorsHeader, HeaderLengthOver100MBIsRejectedWithoutReadingIt) {
  // The file claims to be 1 TB; only the 8-byte prefix is given: the limit is checked first.
  const std::uint64_t claimed = kMaxHeaderBytes + 1;
  ExpectCorrupt(ParseSafetensorsPrefix(kLabel, LengthPrefix(claimed), 1ull << 40),
                {"header length 100000001", "100000000-byte limit"});
  // Exactly at the limit is fine as far as the length goes (then the prefix is too short).
  Result<SafetensorsHeader> at_limit =
      ParseSafetensorsPrefix(kLabel, LengthPrefix(kMaxHeaderBytes), 1ull << 40);
  ASSERT_FALSE(at_limit.ok());
  EXPECT_EQ(at_limit.status().code(), Code::kInvalidArgument) << at_limit.status().ToString();
}

TEST(SafetensorsHeader, FileShorterThanTheLengthPrefixIsRejected) {
  ExpectCorrupt(ParseSafetensorsPrefix(kLabel, std::string("\x02\x00\x00", 3), 3),
                {"3 bytes", "8-byte header length"});
}

TEST(SafetensorsHeader, PrefixShorterThanTheHeaderIsACallerError) {
  const std::string header = Header({{"w", Entry("U8", {4}, 0, 4)}});
  const std::string file = FileBytes(header, 4);
  Result<SafetensorsHeader> r = ParseSafetensorsPrefix(kLabel, file.substr(0, 20), file.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  Result<SafetensorsHeader> longer = ParseSafetensorsPrefix(kLabel, file, file.size() - 1);
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), Code::kInvalidArgument);
}

// ---- JSON -----------------------------------------------------------------------------------

TEST(SafetensorsHeader, InvalidJsonNamesTheByteOffset) {
  // The 'x' is at header byte 5, file offset 13.
  ExpectCorrupt(Parse(R"({"a" x})", 0), {"invalid JSON at byte 13"});
}

TEST(SafetensorsHeader, TruncatedJsonIsRejected) {
  const std::string full = Header({{"w", Entry("U8", {4}, 0, 4)}});
  const std::string cut = full.substr(0, full.size() - 7);
  ExpectCorrupt(Parse(cut, 4), {"truncated JSON at byte " + std::to_string(8 + cut.size())});
}

TEST(SafetensorsHeader, InvalidUtf8IsRejectedAndNotEchoedRaw) {
  Result<SafetensorsHeader> r = Parse("{\"w\xff\x01\":" + Entry("U8", {4}, 0, 4) + "}", 4);
  ExpectCorrupt(r, {"invalid JSON at byte 11", "\\xFF"});
  for (char c : r.status().message()) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "unescaped byte " << static_cast<int>(c);
  }
}

TEST(SafetensorsHeader, HeaderThatIsNotAnObjectIsRejected) {
  ExpectCorrupt(Parse("[1, 2]", 0), {"must be an object", "array"});
}

TEST(SafetensorsHeader, EntryThatIsNotAnObjectIsRejected) {
  ExpectCorrupt(Parse(R"({"w": 5})", 0), {"\"w\"", "entry must be an object"});
}

TEST(SafetensorsHeader, DeeplyNestedJsonIsRejected) {
  ExpectCorrupt(Parse(R"({"w": {"dtype": "U8", "shape": [[4]], "data_offsets": [0, 4]}})", 4),
                {"nested deeper than 3"});
  ExpectCorrupt(Parse(std::string(10000, '[') + std::string(10000, ']'), 0),
                {"nested deeper than 3"});
}

TEST(SafetensorsHeader, DuplicateTensorNamesAreRejected) {
  // nlohmann::json would keep the second silently.
  const std::string header =
      R"({"w":)" + Entry("U8", {4}, 0, 4) + R"(,"w":)" + Entry("U8", {4}, 4, 8) + "}";
  const std::size_t second = header.rfind("\"w\"") + 2;  // closing quote of the second key
  ExpectCorrupt(Parse(header, 8),
                {"duplicate key \"w\"", "the top level", "byte " + std::to_string(8 + second)});
}

TEST(SafetensorsHeader, DuplicateFieldInsideAnEntryIsRejected) {
  ExpectCorrupt(
      Parse(R"({"w": {"dtype": "U8", "dtype": "I8", "shape": [4], "data_offsets": [0, 4]}})", 4),
      {"duplicate key \"dtype\"", "/\"w\""});
}

// ---- fields ---------------------------------------------------------------------------------

struct FieldCase {
  const char* test_name;
  const char* entry;     // JSON of tensor "w.weight" in a file with 24 data bytes
  const char* expected;  // substring of the message
};

class SafetensorsFieldTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(SafetensorsFieldTest, IsRejectedNamingTheTensor) {
  const FieldCase& c = GetParam();
  ExpectCorrupt(Parse(std::string(R"({"w.weight":)") + c.entry + "}", 24),
                {"tensor \"w.weight\"", c.expected});
}

INSTANTIATE_TEST_SUITE_P(
    Fields, SafetensorsFieldTest,
    ::testing::Values(
        FieldCase{"MissingDtype", R"({"shape": [6], "data_offsets": [0, 24]})",
                  "missing \"dtype\""},
        FieldCase{"DtypeNotString", R"({"dtype": 4, "shape": [6], "data_offsets": [0, 24]})",
                  "\"dtype\" must be a string, got integer"},
        FieldCase{"UnknownDtype", R"({"dtype": "F4", "shape": [6], "data_offsets": [0, 24]})",
                  "unknown dtype \"F4\""},
        FieldCase{"LowercaseDtype", R"({"dtype": "f32", "shape": [6], "data_offsets": [0, 24]})",
                  "unknown dtype \"f32\""},
        FieldCase{"MissingShape", R"({"dtype": "F32", "data_offsets": [0, 24]})",
                  "missing \"shape\""},
        FieldCase{"ShapeNotArray", R"({"dtype": "F32", "shape": 6, "data_offsets": [0, 24]})",
                  "\"shape\" must be an array"},
        FieldCase{"NegativeDim", R"({"dtype": "F32", "shape": [-6], "data_offsets": [0, 24]})",
                  "shape[0] must be a non-negative integer, got negative integer"},
        FieldCase{"FloatDim", R"({"dtype": "F32", "shape": [2, 3.0], "data_offsets": [0, 24]})",
                  "shape[1] must be a non-negative integer, got floating-point"},
        FieldCase{"StringDim", R"({"dtype": "F32", "shape": ["6"], "data_offsets": [0, 24]})",
                  "shape[0] must be a non-negative integer, got string"},
        FieldCase{"MissingOffsets", R"({"dtype": "F32", "shape": [6]})",
                  "missing \"data_offsets\""},
        FieldCase{"OffsetsNotArray", R"({"dtype": "F32", "shape": [6], "data_offsets": 0})",
                  "must be an array of two integers"},
        FieldCase{"ThreeOffsets", R"({"dtype": "F32", "shape": [6], "data_offsets": [0, 24, 24]})",
                  "an array of 3"},
        FieldCase{"NegativeOffset", R"({"dtype": "F32", "shape": [6], "data_offsets": [-1, 24]})",
                  "two non-negative integers"},
        FieldCase{"OffsetBeyondUint64",
                  R"({"dtype": "F32", "shape": [6], "data_offsets": [0, 18446744073709551616]})",
                  "two non-negative integers"}),
    [](const ::testing::TestParamInfo<FieldCase>& info) { return info.param.test_name; });

TEST(SafetensorsHeader, MetadataMustMapStringsToStrings) {
  ExpectCorrupt(Parse(R"({"__metadata__": {"format": 1}})", 0),
                {"\"__metadata__\" entry \"format\" must be a string"});
  ExpectCorrupt(Parse(R"({"__metadata__": ["pt"]})", 0), {"\"__metadata__\" must be an object"});
}

// ---- sizes and offsets ----------------------------------------------------------------------

TEST(SafetensorsHeader, ShapeProductOverflowIsRejected) {
  // 2^32 x 2^32 elements = 2^64: does not fit.
  const std::string header = Header({{"big", Entry("U8", {4294967296ull, 4294967296ull}, 0, 8)}});
  ExpectCorrupt(Parse(header, 8), {"tensor \"big\"", "more elements than fit in 64 bits",
                                   "file bytes [" + std::to_string(8 + header.size())});
}

TEST(SafetensorsHeader, ByteCountOverflowIsRejected) {
  // 2^62 F64 elements fit, 2^65 bytes do not.
  const std::string header = Header({{"big", Entry("F64", {1ull << 62}, 0, 8)}});
  ExpectCorrupt(Parse(header, 8), {"tensor \"big\"", "byte count overflows 64 bits",
                                   "file bytes [" + std::to_string(8 + header.size())});
}

TEST(SafetensorsHeader, DtypeTimesShapeMustEqualTheByteRange) {
  const std::string header = Header({{"w", Entry("F32", {2, 3}, 0, 20)}});
  ExpectCorrupt(Parse(header, 20),
                {"tensor \"w\"", "F32 x shape [2, 3] = 24 bytes", "span 20 bytes",
                 "file bytes [" + std::to_string(8 + header.size()) + ", " +
                     std::to_string(8 + header.size() + 20) + ")"});
}

TEST(SafetensorsHeader, BeginAfterEndIsRejected) {
  ExpectCorrupt(Parse(Header({{"w", Entry("U8", {0}, 8, 4)}}), 8),
                {"tensor \"w\"", "data_offsets [8, 4]", "begin > end"});
}

TEST(SafetensorsHeader, OffsetsPastTheDataSectionAreRejected) {
  const std::string header = Header({{"w", Entry("U8", {8}, 4, 12)}});
  const std::uint64_t ds = 8 + header.size();
  ExpectCorrupt(Parse(header, 10),
                {"tensor \"w\"", "data_offsets [4, 12]",
                 "file bytes [" + std::to_string(ds + 4) + ", " + std::to_string(ds + 12) + ")",
                 "data section of 10 bytes"});
  // Offsets near 2^64 must not wrap around into range (nor overflow the message's arithmetic).
  ExpectCorrupt(
      Parse(Header({{"w", Entry("U8", {8}, 18446744073709551607ull, 18446744073709551615ull)}}),
            10),
      {"tensor \"w\"", "run past the data section"});
}

TEST(SafetensorsHeader, OverlappingTensorsAreRejected) {
  const std::string header =
      Header({{"a", Entry("U8", {16}, 0, 16)}, {"b", Entry("U16", {8}, 8, 24)}});
  const std::uint64_t ds = 8 + header.size();
  ExpectCorrupt(Parse(header, 24),
                {"\"a\"", "\"b\"", "overlap at file offset " + std::to_string(ds + 8)});
}

TEST(SafetensorsHeader, ZeroSizeTensorInsideAnotherIsAnOverlap) {
  ExpectCorrupt(Parse(Header({{"a", Entry("U8", {16}, 0, 16)}, {"z", Entry("U8", {0}, 4, 4)}}), 16),
                {"\"a\"", "\"z\"", "overlap"});
}

TEST(SafetensorsHeader, IdenticalRangesAreAnOverlap) {
  ExpectCorrupt(Parse(Header({{"a", Entry("U8", {8}, 0, 8)}, {"b", Entry("I8", {8}, 0, 8)}}), 8),
                {"\"a\"", "\"b\"", "overlap"});
}

TEST(SafetensorsHeader, HoleBetweenTensorsIsRejected) {
  const std::string header =
      Header({{"a", Entry("U8", {8}, 0, 8)}, {"b", Entry("U8", {8}, 16, 24)}});
  const std::uint64_t ds = 8 + header.size();
  ExpectCorrupt(
      Parse(header, 24),
      {"hole", "file bytes [" + std::to_string(ds + 8) + ", " + std::to_string(ds + 16) + ")",
       "\"b\""});
}

TEST(SafetensorsHeader, HoleAtTheStartOfTheDataSectionIsRejected) {
  const std::string header = Header({{"a", Entry("U8", {8}, 4, 12)}});
  const std::uint64_t ds = 8 + header.size();
  ExpectCorrupt(Parse(header, 12),
                {"hole", "file bytes [" + std::to_string(ds) + ", " + std::to_string(ds + 4)});
}

TEST(SafetensorsHeader, TrailingBytesAfterTheLastTensorAreRejected) {
  const std::string header =
      Header({{"b", Entry("U8", {4}, 8, 12)}, {"a", Entry("F32", {2}, 0, 8)}});
  const std::uint64_t ds = 8 + header.size();
  ExpectCorrupt(Parse(header, 15),
                {"3 trailing bytes", "\"b\"",
                 "file bytes [" + std::to_string(ds + 12) + ", " + std::to_string(ds + 15) + ")"});
  ExpectCorrupt(Parse("{}", 5), {"5 trailing bytes"});
}

// ---- files ----------------------------------------------------------------------------------

TEST(ReadSafetensorsHeader, ReadsHeaderAndStatOfARealFile) {
  TempDir dir;
  const fs::path path = dir.path() / "m.safetensors";
  const std::string header = Header({{"__metadata__", R"({"format":"pt"})"},
                                     {"x", Entry("BF16", {3, 5}, 0, 30)},
                                     {"y", Entry("I32", {2}, 30, 38)}});
  const std::string bytes = FileBytes(header, 38);
  WriteFile(path, bytes);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);

  FileStat fstat_out;
  Result<SafetensorsHeader> r = ReadSafetensorsHeader(path.string(), &fstat_out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(fstat_out.size, bytes.size());
  EXPECT_EQ(fstat_out.mtime_ns, st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec);
  EXPECT_EQ(r->data_start, 8 + header.size());
  ASSERT_EQ(r->tensors.size(), 2u);
  EXPECT_EQ(r->tensors[0].name, "x");
  EXPECT_EQ(r->tensors[0].shape, (std::vector<std::uint64_t>{3, 5}));
  EXPECT_EQ(r->tensors[1].name, "y");
  EXPECT_EQ(r->metadata.at("format"), "pt");
  // A null stat pointer is allowed.
  EXPECT_TRUE(ReadSafetensorsHeader(path.string(), nullptr).ok());
}

TEST(ReadSafetensorsHeader, ErrorsNameThePath) {
  TempDir dir;
  const fs::path missing = dir.path() / "missing.safetensors";
  Result<SafetensorsHeader> r = ReadSafetensorsHeader(missing.string(), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find(missing.string()), std::string::npos);

  Result<SafetensorsHeader> d = ReadSafetensorsHeader(dir.path().string(), nullptr);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not a regular file"), std::string::npos);

  // A file cut inside its header.
  const fs::path cut = dir.path() / "cut.safetensors";
  const std::string full = FileBytes(Header({{"w", Entry("U8", {64}, 0, 64)}}), 64);
  WriteFile(cut, full.substr(0, 30));
  Result<SafetensorsHeader> c = ReadSafetensorsHeader(cut.string(), nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kCorrupt);
  EXPECT_NE(c.status().message().find(cut.string()), std::string::npos);
  EXPECT_NE(c.status().message().find("runs past the end of the file"), std::string::npos);

  // A file cut inside its data: the header is fine, the data section is short.
  const fs::path short_data = dir.path() / "short.safetensors";
  WriteFile(short_data, full.substr(0, full.size() - 1));
  Result<SafetensorsHeader> s = ReadSafetensorsHeader(short_data.string(), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(short_data.string()), std::string::npos);
  EXPECT_NE(s.status().message().find("tensor \"w\""), std::string::npos);
  EXPECT_NE(s.status().message().find("data section of 63 bytes"), std::string::npos);
}

}  // namespace
}  // namespace hoist::planner
