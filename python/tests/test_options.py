"""The job options of hoist.load / hoist.load_async are the table's (config/option_table.h,
exposed as hoist._hoist._options()): every entry is a keyword, and a value given as a keyword resolves as the
same value given in a topology file (which the C++ tests compare with the command line and the
C and C++ APIs), and differently from the default. Unknown keywords and wrong types are TypeError
naming them.

Needs PYTHONPATH pointing at the module (ctest sets it)."""
import os
import tempfile
import unittest

import hoist
from hoist import _hoist

BASE = "/models/base"
OTHER = "/models/other"


def sample(o):
    """A valid value of option `o` other than its default, from its own entry (as
    tests/config/option_samples.h derives it): the last other choice; a number's low end (the next
    whole number when that is the default; 1.5 above it for a float, whose low end is excluded);
    a bool's opposite; another model folder."""
    if o["type"] == "str":
        if not o["choices"]:
            return OTHER
        return [c for c in o["choices"].split(" | ") if c != o["default"]][-1]
    if o["type"] == "int":
        v = int(o["lo"])
        return v + 1 if str(v) == o["default"] else v
    if o["type"] == "float":
        return o["lo"] + 1.5
    return o["default"] != "true"


def yaml_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class OptionsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="hoist-py-options-")

    def tearDown(self):
        self.tmp.cleanup()

    def test_every_option_is_a_keyword_resolving_as_the_file_does(self):
        options = _hoist._options()
        self.assertGreater(len(options), 15)
        plain = _hoist._resolve(BASE)
        for o in options:
            with self.subTest(option=o["name"]):
                v = sample(o)
                path = os.path.join(self.tmp.name, o["name"] + ".yaml")
                with open(path, "w") as f:
                    if o["name"] != "model":
                        f.write(f"model: {BASE}\n")
                    f.write(f"{o['name']}: {yaml_text(v)}\n")
                from_file = _hoist._resolve(topology=path)
                self.assertNotEqual(from_file, plain)
                if o["name"] == "model":  # the first argument, model= as a keyword
                    self.assertEqual(_hoist._resolve(model=v), from_file)
                    continue
                self.assertEqual(_hoist._resolve(BASE, **{o["name"]: v}), from_file)
                # None leaves the option to the file (here: to the default).
                self.assertEqual(_hoist._resolve(BASE, **{o["name"]: None}), plain)

    def test_the_docstrings_list_every_option(self):
        for o in _hoist._options():
            self.assertIn("\n  " + o["name"] + ": ", hoist.load.__doc__)
            self.assertIn("\n  " + o["name"] + ": ", hoist.load_async.__doc__)

    def test_unknown_keywords_and_wrong_types_are_type_errors(self):
        with self.assertRaises(TypeError) as e:
            _hoist._resolve(BASE, slot_mb=3)
        self.assertIn("unknown keyword 'slot_mb' (did you mean 'slot_mib'?)", str(e.exception))
        with self.assertRaises(TypeError) as e:
            hoist.load(BASE, staging="register")
        self.assertIn("unknown keyword 'staging'", str(e.exception))
        for kw, bad in (("tp", "2"), ("tp", True), ("tp", 2.0), ("verify", 1), ("layout", 1),
                        ("peer_timeout_s", "3")):
            with self.subTest(kw=kw, bad=bad):
                with self.assertRaises(TypeError) as e:
                    _hoist._resolve(BASE, **{kw: bad})
                self.assertIn(f"keyword {kw} takes", str(e.exception))
        self.assertEqual(_hoist._resolve(BASE, peer_timeout_s=7),
                         _hoist._resolve(BASE, peer_timeout_s=7.0))

    def test_bad_values_are_refused_by_the_resolution(self):
        with self.assertRaises(RuntimeError) as e:
            _hoist._resolve(BASE, threads=100000)
        self.assertIn("--threads 100000 is out of range", str(e.exception))
        with self.assertRaises(RuntimeError) as e:
            _hoist._resolve(BASE, pinning="sometimes")
        self.assertIn("pinning 'sometimes'", str(e.exception))


if __name__ == "__main__":
    unittest.main()
