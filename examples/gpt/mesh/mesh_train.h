// The GPT example's training loop on a device mesh (issue 47): --tp N --pp M --schedule S
// --microbatches K [--virtual-stages V] [--dp D]. Each step: K microbatches of --batch sequences
// per dp rank through this rank's pipeline schedule (gradient accumulation inside the schedule),
// the tied embedding's gradients summed between the first and the last stage, DDP's average over
// the dp slice, clipping by the global norm over every dimension, AdamW. What is equal to the
// one-process run, and why: docs/parallel/tensor.md.
#pragma once

#include <cohort/cohort.h>
#include <nlohmann/json.hpp>

#include <memory>

#include "data/corpus.h"
#include "options.h"

/// Trains on the mesh and returns the result line (as train() does); collective over the job.
nlohmann::json train_mesh(const std::shared_ptr<cohort::Context>& ctx, const Corpus& corpus, const Options& o);
