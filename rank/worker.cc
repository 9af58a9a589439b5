#include "rank/worker.h"
