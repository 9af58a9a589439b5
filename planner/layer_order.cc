#include "planner/layer_order.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

namespace hoist::planner {
namespace {

// The layer groups of a list of tensor names.
template <class Names>
LayerGroups Group(const Names& names) {
  std::map<int, int> layers;  // layer number -> group (filled below)
  for (const auto& n : names) {
    const int layer = LayerOfName(n);
    if (layer >= 0) layers[layer] = 0;
  }
  LayerGroups g;
  g.names.push_back("embeddings");
  for (auto& [layer, group] : layers) {
    group = static_cast<int>(g.names.size());
    g.names.push_back("layer " + std::to_string(layer));
  }
  const int head = static_cast<int>(g.names.size());
  g.names.push_back("head");
  for (const auto& n : names) {
    const int layer = LayerOfName(n);
    if (layer >= 0) {
      g.of_tensor.push_back(layers[layer]);
    } else {
      g.of_tensor.push_back(std::string_view(n).find("embed") != std::string_view::npos ? 0 : head);
    }
  }
  return g;
}

// The groups of the tensors a copy writes (tensors sorted by arena offset in `order_`).
class CopyGroups {
 public:
  CopyGroups(const proto::RankPlan& rp, const LayerGroups& groups) : rp_(rp), groups_(groups) {
    order_.resize(static_cast<std::size_t>(rp.tensors_size()));
    std::iota(order_.begin(), order_.end(), 0);
    std::sort(order_.begin(), order_.end(), [&](int a, int b) {
      return rp.tensors(a).arena_offset() < rp.tensors(b).arena_offset();
    });
  }

  // The latest group among the tensors `c` writes (0 for an empty copy).
  int Of(const proto::Copy& c) const {
    int group = 0;
    ForEach(c, [&](int g) { group = std::max(group, g); });
    return group;
  }

  // Calls fn with the group of every tensor `c` writes.
  template <class F>
  void ForEach(const proto::Copy& c, const F& fn) const {
    if (c.width() == 0 || c.rows() == 0) return;
    const std::uint64_t begin = c.dst_offset();
    const std::uint64_t end = c.dst_offset() + (c.rows() - 1) * c.dst_pitch() + c.width();
    // The first tensor that ends after `begin`, then every one that starts before `end`.
    auto it = std::upper_bound(order_.begin(), order_.end(), begin, [&](std::uint64_t off, int t) {
      return off < rp_.tensors(t).arena_offset();
    });
    if (it != order_.begin()) --it;
    for (; it != order_.end() && rp_.tensors(*it).arena_offset() < end; ++it) {
      const proto::TensorOut& t = rp_.tensors(*it);
      if (t.arena_offset() + t.bytes() <= begin) continue;
      fn(groups_.of_tensor[static_cast<std::size_t>(*it)]);
    }
  }

 private:
  const proto::RankPlan& rp_;
  const LayerGroups& groups_;
  std::vector<int> order_;
};

}  // namespace

int LayerOfName(std::string_view name) {
  static constexpr std::string_view kKey = "layers.";
  const std::size_t at = name.rfind(kKey);
  if (at == std::string_view::npos || (at > 0 && name[at - 1] != '.')) return -1;
  std::size_t i = at + kKey.size();
  long layer = 0;
  const std::size_t first = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - first < 7) {
    layer = layer * 10 + (name[i] - '0');
    ++i;
  }
  if (i == first || (i < name.size() && name[i] != '.')) return -1;
  return static_cast<int>(layer);
}

LayerGroups GroupNamesByLayer(const std::vector<std::string>& tensor_names) {
  return Group(tensor_names);
}

LayerGroups GroupTensorsByLayer(const proto::RankPlan& rank_plan) {
  std::vector<std::string_view> names;
  names.reserve(static_cast<std::size_t>(rank_plan.tensors_size()));
  for (const proto::TensorOut& t : rank_plan.tensors()) names.push_back(t.name());
  return Group(names);
}

void OrderCopiesByLayer(proto::RankPlan* rank_plan) {
  const LayerGroups groups = GroupTensorsByLayer(*rank_plan);
  const CopyGroups of(*rank_plan, groups);
  std::vector<std::pair<int, int>> keyed;  // (group, index)
  keyed.reserve(static_cast<std::size_t>(rank_plan->copies_size()));
  for (int i = 0; i < rank_plan->copies_size(); ++i) {
    keyed.emplace_back(of.Of(rank_plan->copies(i)), i);
  }
  if (std::is_sorted(keyed.begin(), keyed.end())) return;
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  google::protobuf::RepeatedPtrField<proto::Copy> sorted;
  sorted.Reserve(rank_plan->copies_size());
  for (const auto& [group, index] : keyed) *sorted.Add() = rank_plan->copies(index);
  rank_plan->mutable_copies()->Swap(&sorted);
}

std::vector<int> CopiesUntilGroupLands(const proto::RankPlan& rank_plan,
                                       const LayerGroups& groups) {
  const CopyGroups of(rank_plan, groups);
  std::vector<int> need(groups.names.size(), 0);
  for (int i = 0; i < rank_plan.copies_size(); ++i) {
    of.ForEach(rank_plan.copies(i), [&](int g) {
      int& n = need[static_cast<std::size_t>(g)];
      n = std::max(n, i + 1);
    });
  }
  for (std::size_t g = 1; g < need.size(); ++g) need[g] = std::max(need[g], need[g - 1]);
  return need;
}

}  // namespace hoist::planner
