// Untrusted strings reach the terminal and the logs escaped (util/printable.h): the log formatter
// (launch/logging.h) in-process, then the real `hoist` binary on a checkpoint whose tensor name
// holds an ANSI escape and on a topology file of binary garbage. The check on every output is
// independent of Printable: no byte below 0x20 other than '\n', no DEL, and valid UTF-8.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "launch/logging.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace hoist::launch {
namespace {

// True when `s` is valid UTF-8 whose only control byte is '\n'.
bool CleanForATerminal(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n') || c == 0x7F) return false;
      ++i;
      continue;
    }
    const int n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    if (c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) return false;  // C1 controls
    i += n;
  }
  return true;
}

TEST(PrintableOutput, TheCheckItselfRejectsRawControlBytes) {
  EXPECT_TRUE(CleanForATerminal("ok \\x1B[31m\n"));
  EXPECT_FALSE(CleanForATerminal("\x1b[31m"));
  EXPECT_FALSE(CleanForATerminal("a\rb"));
  EXPECT_FALSE(CleanForATerminal("\xff"));
  EXPECT_FALSE(CleanForATerminal("\xc2\x9b"));
}

TEST(PrintableOutput, LogFormatterEscapesTheMessage) {
  std::ostringstream os;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(os);
  sink->set_formatter(PrintableFormatter("[x] %v|%%v"));
  spdlog::logger logger("printable-test", sink);
  logger.info("tensor '{}' in {}", "w\x1b[31mred\x1b[0m", "/data/\xff\xfe/m.safetensors");
  logger.info("two\nlines");
  EXPECT_EQ(os.str(),
            "[x] tensor 'w\\x1B[31mred\\x1B[0m' in /data/\\xFF\\xFE/m.safetensors|%v\n"
            "[x] two\\x0Alines|%v\n");
}

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

RunResult RunHoist(const std::string& args) {
  const std::string cmd = "timeout 120 " + testing::HoistBin() + " " + args + " 2>&1";
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// A safetensors file: the header JSON (nlohmann escapes the control bytes in names as \u001b,
// as any writer must) and `data`.
void WriteSafetensors(const std::string& path, const nlohmann::json& header,
                      const std::string& data) {
  const std::string h = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << out << h << data;
}

TEST(PrintableOutput, AnsiEscapeInATensorNameIsPrintedEscaped) {
  testing::ScratchDir tmp;
  const std::string model = tmp.Sub("m");
  const std::string mk =
      testing::MkckptBin() + " --preset qwen3-tiny --out " + model + " --threads 1 > /dev/null";
  ASSERT_EQ(std::system(mk.c_str()), 0);
  // Every tensor of the preset stays; one more, named with an escape sequence, is appended.
  const std::string path = model + "/model.safetensors";
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  std::string data = bytes.substr(8 + n);
  const std::string evil = "model.layers.0.mlp.\x1b[31mevil\x1b[0m.weight";
  header[evil] = {
      {"dtype", "BF16"}, {"shape", {2}}, {"data_offsets", {data.size(), data.size() + 4}}};
  data += std::string("\x01\x3f\x02\x3f", 4);
  WriteSafetensors(path, header, data);

  for (const std::string& cmd : {"plan --model " + model, "load --device host --model " + model}) {
    const RunResult r = RunHoist(cmd + " --log-level debug");
    EXPECT_LT(r.exit_code, 128) << cmd << "\n" << r.output;  // never a signal
    EXPECT_NE(r.output.find("model.layers.0.mlp.\\x1B[31mevil\\x1B[0m.weight"), std::string::npos)
        << cmd << "\n"
        << r.output;
    EXPECT_TRUE(CleanForATerminal(r.output)) << cmd << "\n" << r.output;
  }
}

TEST(PrintableOutput, BinaryGarbageInATopologyFileIsPrintedEscaped) {
  testing::ScratchDir tmp;
  const std::string yaml = tmp.Sub("t.yaml");
  std::ofstream(yaml, std::ios::binary) << "tp: 1\n\x1b]0;owned\x07\xff\xfe\x01: 3\n";
  const RunResult r = RunHoist("plan --model " + tmp.Sub("none") + " --topology " + yaml);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("hoist: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\\x1B]0;owned\\x07\\xFF\\xFE\\x01"), std::string::npos) << r.output;
  EXPECT_TRUE(CleanForATerminal(r.output)) << r.output;
}

// A model folder whose name is not UTF-8: the plan table and the plan JSON are written (escaped)
// instead of the JSON writer throwing (it used to abort). The report JSON is covered by
// tests/coordinator/report_test.cc.
TEST(PrintableOutput, InvalidUtf8InTheModelPathIsWrittenEscaped) {
  testing::ScratchDir tmp;
  const std::string model = tmp.Sub("m\xff\xfe");
  const std::string mk =
      testing::MkckptBin() + " --preset qwen3-tiny --out '" + model + "' --threads 1 > /dev/null";
  ASSERT_EQ(std::system(mk.c_str()), 0);
  const RunResult r = RunHoist("plan --model '" + model + "' --json " + tmp.Sub("plan.json"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(CleanForATerminal(r.output)) << r.output;
  std::ifstream plan(tmp.Sub("plan.json"));
  const nlohmann::json pj = nlohmann::json::parse(plan, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(pj.is_object());
  EXPECT_EQ(pj["model_dir"], tmp.Sub("m\\xFF\\xFE"));
}

}  // namespace
}  // namespace hoist::launch
