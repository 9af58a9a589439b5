// The options of a rank's dedup exchange (rank/exchange.h), apart so that the rank's entry point
// (rank/rank_job.h) and the coordinator that fills them need not see the exchange itself.
// Ownership: a plain value. Threading: none.
#pragma once

namespace hoist::rank {

struct ExchangeOptions {
  double timeout_s = 120;  // bound on any wait for a peer (set-up, transfers)
};

}  // namespace hoist::rank
