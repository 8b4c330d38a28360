// Precompiled header for cohort's torch-using sources: parsing torch/torch.h costs ~30 s a file
// on two cores, once here instead.
#pragma once
#include <torch/torch.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
