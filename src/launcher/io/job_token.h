// launcher/io/job_token.h — the job's secret, which every agent of a job shares and nobody else has.
//
// It authenticates every message between agents (channel.h) and, through a key derived from it
// (COHORT_JOB_KEY), every rank's part of a checkpoint commit (checkpoint/save_commit.cpp). A job
// on one machine makes its own and keeps it in memory. A job of several machines needs the same
// token on every node: --job-token-file FILE (owner-only permissions, like an ssh key) or
// $COHORT_JOB_TOKEN; without one, node 0 (or the elastic rendezvous host) makes one in a 0600 file
// of its run directory and says how to share it, and the other nodes refuse to start. See
// docs/security.md.
#pragma once

#include <string>

#include "launcher/config/options.h"

namespace cohort::launcher {

/// Shortest token accepted: 32 characters (128 bits as hex, as `openssl rand -hex 16` prints).
constexpr size_t kMinJobTokenLength = 32;

/// Reads --job-token-file, else $COHORT_JOB_TOKEN, into o.job_token (trailing whitespace dropped).
/// Throws ConfigError naming the file and what is wrong: missing, not a regular file, readable or
/// writable by others, too short or too long.
void load_job_token(RunOptions& o);

/// The token of a job whose agents are all this one: made at random when none was given.
void ensure_private_job_token(RunOptions& o);

/// The token of the agent others join (node 0, the elastic host): when none was given, makes one
/// in a new 0600 file `job-token` in the run directory (o.run_dir is set to it) and prints its path
/// and how to hand it to the other nodes.
void ensure_shared_job_token(RunOptions& o);

/// A joining agent's token: throws ConfigError, naming `who`, when it has none.
void require_job_token(const RunOptions& o, const std::string& who);

/// The key the workers sign their checkpoint commit parts with (the value of COHORT_JOB_KEY).
std::string worker_job_key(const RunOptions& o);

}  // namespace cohort::launcher
