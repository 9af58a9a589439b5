// A rank's tensors in the order an engine uses them, for loads that stream behind the engine
// (hoist::LoadAsync): the embeddings, decoder layer 0 .. N-1, then the rest (final norm, LM
// head, anything outside the decoder layers). A tensor's layer is the number after the last
// "layers." in its name ("model.layers.7.mlp..." is layer 7; MTP layers beyond the config's count
// are layers too); a tensor outside the layers is in the embeddings group when its name holds
// "embed", else in the last group.
//
// Ownership: plain values. Failure: none (every name has a group). Threading: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "proto/plan.pb.h"

namespace hoist::planner {

struct LayerGroups {
  // "embeddings", "layer 0", ..., "layer N-1", "head": always the first and last, with a group per
  // distinct layer number between them (ascending); a group may hold no tensor.
  std::vector<std::string> names;
  std::vector<int> of_tensor;  // the group of rank_plan.tensors(i)
};

// The decoder layer `name` belongs to, or -1.
int LayerOfName(std::string_view name);

LayerGroups GroupTensorsByLayer(const proto::RankPlan& rank_plan);
LayerGroups GroupNamesByLayer(const std::vector<std::string>& tensor_names);

// Stable-sorts rank_plan's copies by the group of the tensors they write (a copy that touches
// several tensors goes with the latest of their groups), so that layer k's bytes are read and
// land before layer k+1's; within a group the plan's order (file, offset) stays.
void OrderCopiesByLayer(proto::RankPlan* rank_plan);

// For each group g: how many leading copies of rank_plan hold every byte of groups 0..g (so
// groups 0..g have landed once those copies have); 0 when none of them has a copy.
std::vector<int> CopiesUntilGroupLands(const proto::RankPlan& rank_plan, const LayerGroups& groups);

}  // namespace hoist::planner
