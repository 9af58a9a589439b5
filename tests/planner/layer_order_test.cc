// planner/layer_order.h on hand-made rank plans: names map to layer groups (embeddings, layers
// in numeric order, head), ordering the copies by layer keeps every copy (a permutation) and
// file order within a group, and CopiesUntilGroupLands covers every copy of each group and the
// groups before it.
#include "planner/layer_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

namespace hoist::planner {
namespace {

TEST(LayerOrder, NamesToGroups) {
  EXPECT_EQ(LayerOfName("model.layers.12.mlp.down_proj.weight"), 12);
  EXPECT_EQ(LayerOfName("model.language_model.layers.3.self_attn.qkv_proj.weight"), 3);
  EXPECT_EQ(LayerOfName("model.norm.weight"), -1);
  EXPECT_EQ(LayerOfName("model.sublayers.3.x"), -1);
  EXPECT_EQ(LayerOfName("model.layers.x.y"), -1);
  const LayerGroups g =
      GroupNamesByLayer({"lm_head.weight", "model.layers.10.a", "model.layers.2.b",
                         "model.embed_tokens.weight", "model.norm.weight"});
  ASSERT_EQ(g.names, (std::vector<std::string>{"embeddings", "layer 2", "layer 10", "head"}));
  EXPECT_EQ(g.of_tensor, (std::vector<int>{3, 2, 1, 0, 3}));
}

// Tensors in arena order: head, layer 1, layer 0, embeddings (64 bytes each); copies in file
// order write them back to front, one of them spanning layer 1 and layer 0.
proto::RankPlan BackwardsPlan() {
  proto::RankPlan rp;
  const char* names[] = {"lm_head.weight", "model.layers.1.w", "model.layers.0.w",
                         "model.embed_tokens.weight"};
  for (int i = 0; i < 4; ++i) {
    proto::TensorOut* t = rp.add_tensors();
    t->set_name(names[i]);
    t->set_arena_offset(64 * i);
    t->set_bytes(64);
  }
  auto copy = [&](std::uint64_t src, std::uint64_t dst, std::uint64_t width) {
    proto::Copy* c = rp.add_copies();
    c->set_src_offset(src);
    c->set_dst_offset(dst);
    c->set_width(width);
    c->set_rows(1);
  };
  copy(0, 0, 64);      // head
  copy(64, 64, 96);    // layer 1 and the first half of layer 0
  copy(160, 160, 32);  // layer 0
  copy(192, 192, 64);  // embeddings
  return rp;
}

TEST(LayerOrder, CopiesFollowTheLayersAndLandInOrder) {
  proto::RankPlan rp = BackwardsPlan();
  const proto::RankPlan before = rp;
  OrderCopiesByLayer(&rp);
  ASSERT_EQ(rp.copies_size(), before.copies_size());
  std::vector<std::uint64_t> srcs;
  for (const proto::Copy& c : rp.copies()) srcs.push_back(c.src_offset());
  // embeddings, layer 0, then the copy spanning layers 0 and 1 (goes with layer 1), head.
  EXPECT_EQ(srcs, (std::vector<std::uint64_t>{192, 160, 64, 0}));
  const LayerGroups g = GroupTensorsByLayer(rp);
  ASSERT_EQ(g.names.size(), 4u);
  // Layer 0 needs the spanning copy too (index 2): it lands with layer 1.
  EXPECT_EQ(CopiesUntilGroupLands(rp, g), (std::vector<int>{1, 3, 3, 4}));
  // A second ordering changes nothing.
  proto::RankPlan again = rp;
  OrderCopiesByLayer(&again);
  EXPECT_EQ(again.SerializeAsString(), rp.SerializeAsString());
}

}  // namespace
}  // namespace hoist::planner
