// cohort/cohort.h — everything a training program needs, in one include.
#pragma once

#include "cohort/checkpointer.h"
#include "cohort/checksum.h"
#include "cohort/comm_hook.h"
#include "cohort/context.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/distributed_sampler.h"
#include "cohort/error.h"
#include "cohort/fused_adam.h"
#include "cohort/fused_sgd.h"
#include "cohort/job_env.h"
#include "cohort/local_sgd.h"
#include "cohort/memory_reuse.h"
#include "cohort/sharded_data_parallel.h"
#include "cohort/monitor.h"
#include "cohort/threads.h"
#include "cohort/version.h"
