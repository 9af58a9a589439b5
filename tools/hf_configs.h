// The config.json texts transformers writes for tiny models of each architecture, embedded for the
// hoist-mkckpt presets (tools/presets.cc): copies of tests/data/hf/<arch>/config.json, kept equal
// to them by tests/tools/presets_test.cc.
//
// Ownership: the texts are static; the views stay valid for the program's lifetime.
// Failure: an unknown name gives an empty view; nothing throws.
// Threading: pure functions over constant data, safe from any thread.
#pragma once

#include <string_view>
#include <vector>

namespace hoist::tools {

// The config.json text for `arch` (a tests/data/hf folder name such as "mixtral", or
// "gpt_oss_mxfp4" for tests/data/quant/gpt_oss_mxfp4); empty when there is none.
std::string_view HfTinyConfig(std::string_view arch);

// Every name HfTinyConfig knows, in its table order.
std::vector<std::string_view> HfTinyConfigNames();

}  // namespace hoist::tools
