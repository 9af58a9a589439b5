#!/usr/bin/env python3
"""tools/check_function_length.py on synthetic sources whose function lengths are known by
construction: it must fail on a long function (so the ctest over coordinator/, rank/ and
transport/staging/pipeline.cc can fail), pass at the limit, and not be fooled by braces in strings,
comments, raw strings, initialisers, constructor initialiser lists or lambdas."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "tools", "check_function_length.py")
sys.path.insert(0, os.path.dirname(TOOL))
import check_function_length as cfl  # noqa: E402


def body(n):
    """A function body of exactly n lines, braces included."""
    return "{\n" + "".join(f"  x += {i};\n" for i in range(n - 2)) + "}\n"


def run(files, limit=80):
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        r = subprocess.run([sys.executable, TOOL, "--max", str(limit), d], capture_output=True,
                           text=True, check=False)
        return r.returncode, r.stdout + r.stderr


class CheckFunctionLengthTest(unittest.TestCase):
    def lengths(self, text):
        return {name: lines for name, _, lines in cfl.functions(text)}

    def test_long_function_fails_naming_it(self):
        rc, out = run({"a.cc": "namespace n {\nvoid Short() " + body(5) + "int Long(int x) " +
                       body(81) + "}\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("a.cc:7: Long is 81 lines (max 80)", out)
        self.assertNotIn("Short", out)

    def test_at_the_limit_passes(self):
        rc, out = run({"a.cc": "int AtLimit(int x) " + body(80)})
        self.assertEqual(rc, 0, out)

    def test_limit_is_the_option(self):
        rc, out = run({"a.h": "int F(int x) " + body(10)}, limit=9)
        self.assertEqual(rc, 1, out)
        self.assertIn("F is 10 lines (max 9)", out)

    def test_missing_path_is_a_usage_error(self):
        r = subprocess.run([sys.executable, TOOL, "/nonexistent/hoist"], capture_output=True,
                           text=True, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent/hoist", r.stderr)

    def test_lengths_of_members_methods_and_lambdas(self):
        text = (
            "namespace a::b {\n"
            "namespace {\n"
            "struct S {\n"
            "  int Inline() const " + body(4) +
            "  std::function<void(int)> f_{};\n"
            "  int v_ = {3};\n"
            "};\n"
            "}  // namespace\n"
            "class C final : public Base {\n"
            " public:\n"
            "  C(int a, int b) : a_(a), b_{b}, c_(Make({1, 2})) " + body(3) +
            "  bool operator==(const C& o) const " + body(3) +
            "  auto Trailing() -> std::vector<int> " + body(5) +
            "};\n"
            "std::function<void(int)> Maker(int z) {\n"
            "  auto l = [z](int y) {\n"
            "    return y + z;\n"
            "  };\n"
            "  return l;\n"
            "}\n"
            "Result<std::unique_ptr<T>> S::Create(const X& x) noexcept " + body(6) +
            "}  // namespace a::b\n")
        self.assertEqual(self.lengths(text), {
            "Inline": 4, "C": 3, "operator==": 3, "Trailing": 5, "Maker": 6, "S::Create": 6})

    def test_braces_in_strings_comments_and_preprocessor_do_not_count(self):
        text = (
            "#define OPEN {\n"
            "// } a comment brace\n"
            "/* { block\n   } */\n"
            "const char* kText = \"}{\";\n"
            "char c = '{';\n"
            "const char* kRaw = R\"x(}\n{)x\";\n"
            "int F(int x) {\n"
            "  const char* s = \"}\";  // }\n"
            "  return x;\n"
            "}\n")
        self.assertEqual(self.lengths(text), {"F": 4})

    def test_initialisers_are_not_functions(self):
        text = ("const int kTable[] = {1, 2, {3}};\n"
                "constexpr Limits kLimits{.a = 1};\n"
                "auto kLambda = [](int x) {\n  return x;\n};\n"
                "int G() " + body(3))
        self.assertEqual(self.lengths(text), {"G": 3})


if __name__ == "__main__":
    unittest.main()
