// DecoderMaker: the making runs on a helper thread and is waited for only by Get; its error is
// every Get's; Destroy destroys the decoder it made exactly once.
#include "transport/packed/decoder_maker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>

#include "tests/transport/test_util.h"
#include "transport/devices/decode_job.h"
#include "transport/devices/device.h"

namespace hoist::transport {
namespace {

using testtransport::SlowDecoderDevice;
using testtransport::WithWatchdog;

std::unique_ptr<SlowDecoderDevice> Device0() {
  return std::make_unique<SlowDecoderDevice>(OpenHostDevice(), std::chrono::milliseconds(0));
}

// A maker started on a device whose making is held until `open` is set.
struct HeldMaking {
  HeldMaking() {
    dev->HoldMakingUntil(open.get_future().share());
    maker.Start(*dev, set);  // returns although the making is held
  }
  std::unique_ptr<SlowDecoderDevice> dev = Device0();
  std::promise<void> open;
  DecodeSet set;
  DecoderMaker maker;
};

TEST(DecoderMakerTest, MakesOnAHelperThreadAndGetWaitsForIt) {
  HeldMaking h;
  auto& [dev, open, set, maker] = h;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(maker.Ready());
  EXPECT_FALSE(maker.making().has_value());
  open.set_value();
  Result<DecoderId> d = WithWatchdog([&] { return maker.Get(); });
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(maker.Ready());
  Result<DecoderId> again = maker.Get();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *d);
  ASSERT_TRUE(maker.making().has_value());
  EXPECT_LE(maker.making()->start, maker.making()->end);
  // The device's timed steps come with it (this device's one step: the held making).
  ASSERT_EQ(maker.making()->steps.size(), 1u);
  EXPECT_STREQ(maker.making()->steps[0].what, "making delayed");
  EXPECT_GE(maker.making()->steps[0].end - maker.making()->steps[0].start,
            std::chrono::milliseconds(15));
  EXPECT_LE(maker.making()->start, maker.making()->steps[0].start);
  EXPECT_LE(maker.making()->steps[0].end, maker.making()->end);
  ASSERT_TRUE(maker.Destroy().ok());
  // Destroyed once: the device no longer knows it, and the maker no longer hands it out.
  EXPECT_EQ(dev->DestroyDecoder(*d).code(), Code::kInvalidArgument);
  EXPECT_EQ(maker.Get().status().code(), Code::kInternal);
  EXPECT_TRUE(maker.Destroy().ok());  // nothing left to destroy
}

TEST(DecoderMakerTest, AFailedMakingIsEveryGetsErrorAndDestroysNothing) {
  auto dev = Device0();
  dev->FailMaking(Status::ResourceExhausted("cuda:0: cudaMalloc(decoder, 6 MB): out of memory"));
  DecodeSet set;
  DecoderMaker maker;
  maker.Start(*dev, set);
  for (int i = 0; i < 2; ++i) {
    Result<DecoderId> d = maker.Get();
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), Code::kResourceExhausted);
    EXPECT_NE(d.status().message().find("out of memory"), std::string::npos);
  }
  EXPECT_FALSE(maker.making().has_value());
  EXPECT_TRUE(maker.Destroy().ok());
  EXPECT_EQ(maker.Get().status().code(), Code::kResourceExhausted);
}

TEST(DecoderMakerTest, GetBeforeStartIsInternal) {
  DecoderMaker maker;
  EXPECT_TRUE(maker.Ready());
  EXPECT_EQ(maker.Get().status().code(), Code::kInternal);
  EXPECT_TRUE(maker.Destroy().ok());
  EXPECT_FALSE(maker.making().has_value());
}

TEST(DecoderMakerTest, DestroyWaitsForAMakingStillRunning) {
  HeldMaking h;
  auto& [dev, open, set, maker] = h;
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    open.set_value();
  });
  Status s = WithWatchdog([&] { return maker.Destroy(); });
  opener.join();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(maker.Get().status().code(), Code::kInternal);  // it was made, then destroyed
}

}  // namespace
}  // namespace hoist::transport
