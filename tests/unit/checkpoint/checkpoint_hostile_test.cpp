// Checkpoint parsers against hostile input (issues 22 and 50): manifests, safetensors headers,
// sampler state and the files themselves; JSON nested too deep, strings that are not UTF-8. Each is a clear error naming the problem, never an abort, a
// hang (a FIFO) or an endless read (/dev/zero). The Checkpointer's fallback over such damage is
// CheckpointCorruption in checkpoint_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/commit_parts.h"
#include "checkpoint/format/safetensors.h"
#include "cohort/distributed_sampler.h"
#include "cohort/error.h"
#include "runtime/json_fields.h"

namespace fs = std::filesystem;
using namespace cohort;
using json = nlohmann::json;

namespace {

// A manifest as the Checkpointer writes it for one rank with an optimizer.
json good_manifest() {
  return json::parse(R"({"format":"cohort-checkpoint","version":1,"step":2,"epoch":0,"world_size":1,
    "created_unix_ms":1,"files":[
      {"name":"model.safetensors","bytes":10,"xxh3":"0000000000000001","rank":0,"role":"model"},
      {"name":"optimizer.safetensors","bytes":10,"xxh3":"0000000000000002","rank":0,"role":"optimizer"}],
    "sampler":null,"optimizer":{"type":"Adam","groups":[{"lr":0.01,"params":4}]},
    "rng":[{"rank":0,"cpu":"00ff","cuda":[]}],"metadata":{}})");
}

json rank_state_file() {
  return json{{"name", "rank-00000-of-00001.safetensors"}, {"bytes", 10}, {"xxh3", "0000000000000003"},
              {"rank", 0}, {"role", "rank_state"}};
}

std::string manifest_problem(const json& m) {
  try {
    ckpt::Manifest::parse(m.dump());
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string header_problem(const std::string& header_json, uint64_t data_bytes) {
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((header_json.size() >> (8 * i)) & 0xff);
  prefix += header_json;
  try {
    ckpt::parse_header(prefix, prefix.size() + data_bytes);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

TEST(CheckpointHostile, ManifestsThatLieAreRefused) {
  ASSERT_EQ(manifest_problem(good_manifest()), "");
  json with_rank_state = good_manifest();
  with_rank_state["files"].push_back(rank_state_file());
  with_rank_state["rank_state"] = json{{"0", "{}"}};
  ASSERT_EQ(manifest_problem(with_rank_state), "");
  json with_program = good_manifest();
  with_program["program"] = "exe-xxh3:0123456789abcdef";
  ASSERT_EQ(ckpt::Manifest::parse(with_program.dump()).program, "exe-xxh3:0123456789abcdef");
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases{
      {[](json& m) { m["files"] = json::array(); }, "lists 0 model files"},
      {[](json& m) { m["files"].erase(0); }, "lists 0 model files"},
      {[](json& m) { m["files"].push_back(m["files"][0]); }, "twice"},
      {[](json& m) { m["files"].erase(1); }, "lists 0 optimizer files for one optimizer"},
      {[](json& m) { m["step"] = 1e300; }, "\"step\""},
      {[](json& m) { m["step"] = -1; }, "\"step\""},
      {[](json& m) { m["step"] = "2"; }, "\"step\""},
      {[](json& m) { m["world_size"] = 0; }, "\"world_size\""},
      {[](json& m) { m["world_size"] = 4294967297.0; }, "\"world_size\""},
      {[](json& m) { m["files"][0]["rank"] = 3; }, "\"rank\""},
      {[](json& m) { m["files"][0]["bytes"] = -5; }, "\"bytes\""},
      {[](json& m) { m["files"][0]["role"] = "payload"; }, "role \"payload\""},
      {[](json& m) { m["files"][0]["name"] = "../../etc/passwd"; }, "outside its directory"},
      {[](json& m) { m["files"] = "model.safetensors"; }, "\"files\" list"},
      {[](json& m) { m["rng"][0]["cpu"] = 5; }, "\"cpu\" string"},
      {[](json& m) { m["rng"][0]["cuda"] = "x"; }, "CUDA RNG"},
      {[](json& m) { m["metadata"] = json{{"k", 1}}; }, "not a string"},
      {[](json& m) { m["sampler"] = "x"; }, "\"sampler\" object"},
      {[](json& m) { m.erase("format"); }, "\"format\" string"},
      {[](json& m) { m = json::array(); }, "not a JSON object"},
      // A rank's own state (a DDP comm hook's): its text and its file, for every rank or none.
      {[](json& m) { m["rank_state"] = json{{"0", "{}"}}; }, "lists 0 rank_state files of rank 0 with its text"},
      {[](json& m) { m["files"].push_back(rank_state_file()); }, "lists 1 rank_state files of rank 0 without its text"},
      {[](json& m) {
         m["files"].push_back(rank_state_file());
         m["rank_state"] = json{{"1", "{}"}};
       },
       "\"rank_state\" of \"1\", not a rank of the job"},
      {[](json& m) {
         m["files"].push_back(rank_state_file());
         m["rank_state"] = json{{"0", 5}};
       },
       "\"rank_state\" with a value that is not a string"},
      // The writer's identity (snapshots): a string of 1 to 256 characters.
      {[](json& m) { m["program"] = 7; }, "\"program\" string"},
      {[](json& m) { m["program"] = ""; }, "\"program\" of 0 characters"},
      {[](json& m) { m["program"] = std::string(300, 'v'); }, "\"program\" of 300 characters"},
  };
  for (const auto& [damage, needle] : cases) {
    json m = good_manifest();
    damage(m);
    const std::string problem = manifest_problem(m);
    EXPECT_NE(problem.find(needle), std::string::npos) << m.dump() << "\ngave: " << problem;
  }
}

TEST(CheckpointHostile, SafetensorsHeadersThatOverflowAreRefused) {
  EXPECT_EQ(header_problem(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 24), "");
  const std::vector<std::pair<std::string, std::string>> cases{
      // 2^32 x 2^32 bytes wraps to 0 in 64 bits: the shape must not pass as an empty tensor.
      {R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "overflows"},
      {R"({"w":{"dtype":"F32","shape":[1e300],"data_offsets":[0,4]}})", "not a non-negative integer"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "not a non-negative integer"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "data_offsets"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "data_offsets"},
      {R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "shape"},
      {R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "dtype"},
      {R"({"w":5})", "not an object"},
      {R"({"__metadata__":"x"})", "__metadata__"},
  };
  for (const auto& [header, needle] : cases) {
    const std::string problem = header_problem(header, 4);
    EXPECT_NE(problem.find(needle), std::string::npos) << header << "\ngave: " << problem;
  }
}

TEST(CheckpointHostile, SamplerStateWithWrongNumbersIsAConfigError) {
  const std::string good = R"({"epoch":1,"consumed":8,"dataset_size":100,"seed":7,"shuffle":true})";
  EXPECT_EQ(SamplerState::from_json(good).consumed, 8);
  for (const std::string bad : {R"({"epoch":1e300,"consumed":8,"dataset_size":100,"seed":7,"shuffle":true})",
                                R"({"epoch":1,"consumed":-8,"dataset_size":100,"seed":7,"shuffle":true})",
                                R"({"epoch":1,"consumed":8,"dataset_size":"100","seed":7,"shuffle":true})",
                                R"({"epoch":1,"consumed":8,"dataset_size":100,"seed":7,"shuffle":1})", R"([1])"}) {
    EXPECT_THROW(SamplerState::from_json(bad), ConfigError) << bad;
  }
}

TEST(CheckpointHostile, OnlyRegularFilesAreRead) {
  const fs::path dir = fs::temp_directory_path() / ("cohort_hostile_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "outside.safetensors") << "secret";
  ASSERT_EQ(mkfifo((dir / "fifo").c_str(), 0600), 0);
  fs::create_symlink(dir / "outside.safetensors", dir / "link");
  fs::create_symlink("/dev/zero", dir / "zero");
  uint64_t bytes = 0;
  for (const char* name : {"fifo", "link", "zero"}) {
    try {
      ckpt::open_checkpoint_file((dir / name).string(), 0, &bytes);
      ADD_FAILURE() << name << " was opened";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("regular files only"), std::string::npos) << e.what();
    }
  }
  fs::create_directories(dir / "step-00000001");
  ASSERT_EQ(mkfifo((dir / "step-00000001" / "manifest.json").c_str(), 0600), 0);  // would block a reader
  fs::create_directories(dir / "step-00000002");
  fs::create_symlink("/dev/zero", dir / "step-00000002" / "manifest.json");  // would never end
  const auto listed = ckpt::list_checkpoints(dir.string());  // returns: no hang, no endless read
  ASSERT_EQ(listed.size(), 2u);
  for (const auto& c : listed) {
    EXPECT_FALSE(c.manifest.has_value());
    EXPECT_NE(c.problem.find("regular files only"), std::string::npos) << c.problem;
  }
  const fs::path big = dir / "step-00000003";
  fs::create_directories(big);
  { std::ofstream(big / "manifest.json").put('{'); }
  fs::resize_file(big / "manifest.json", (64u << 20) + 1);  // sparse: no disk used
  std::string problem;
  EXPECT_FALSE(ckpt::read_manifest(big.string(), &problem).has_value());
  EXPECT_NE(problem.find("more than the"), std::string::npos) << problem;
  fs::remove_all(dir);
}

// A rank's part of a commit travels through the job's store, which a stranger may write to (a
// TCPStore on the master address): with the job key, only the rank's own part for this save and
// this round is taken (issue 22).
TEST(CheckpointHostile, CommitPartsAreTakenOnlyWhenAuthentic) {
  const std::string key(64, 'k'), at = "cohort/ckpt/0/3/1";
  const json part{{"rank", 1}, {"rng_cpu", "00"}, {"rng_cuda", json::array()}};
  const std::string sealed = ckpt::sealed_part(key, at, 2, part);
  ASSERT_TRUE(ckpt::opened_part(key, at, 2, sealed).has_value());
  EXPECT_EQ(*ckpt::opened_part(key, at, 2, sealed), part);
  EXPECT_FALSE(ckpt::opened_part(key, at, 2, R"({"error": "forged by a stranger"})"));  // the probe's attack
  EXPECT_FALSE(ckpt::opened_part(key, at, 2, std::string(64, '0') + " {\"rank\": 1}"));
  EXPECT_FALSE(ckpt::opened_part(key, "cohort/ckpt/0/4/1", 2, sealed));  // replayed into a later save
  EXPECT_FALSE(ckpt::opened_part(key, "cohort/ckpt/0/3/0", 2, sealed));  // ... or as another rank's
  EXPECT_FALSE(ckpt::opened_part(key, at, 3, sealed));                   // ... or in the next round
  EXPECT_FALSE(ckpt::opened_part(std::string(64, 'x'), at, 2, sealed));  // another job's key
  std::string tampered = sealed;
  tampered[tampered.size() - 3] ^= 1;
  EXPECT_FALSE(ckpt::opened_part(key, at, 2, tampered));
  // Without a key (a program not started by cohort run) parts are plain JSON objects, as before.
  EXPECT_EQ(ckpt::sealed_part("", at, 0, part), part.dump());
  EXPECT_TRUE(ckpt::opened_part("", at, 0, part.dump()).has_value());
  EXPECT_FALSE(ckpt::opened_part("", at, 0, "not json"));
  EXPECT_FALSE(ckpt::opened_part("", at, 0, "[1, 2]"));
}

// Parsing 100,000 nested arrays (200 KB) is fine for nlohmann; copying or dumping them recurses
// once a level and overflows the stack: SIGSEGV in every reader (issue 50). Each parser caps the
// depth at 64 levels and says so.
std::string nested_arrays(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(CheckpointHostile, JsonNestedDeeperThan64LevelsIsRefused) {
  const std::string deep = nested_arrays(100000);
  std::string manifest = good_manifest().dump();
  const std::string sampler = "\"sampler\":null";
  ASSERT_NE(manifest.find(sampler), std::string::npos);
  manifest.replace(manifest.find(sampler), sampler.size(), "\"sampler\":{\"x\":" + deep + "}");
  try {
    ckpt::Manifest::parse(manifest);
    ADD_FAILURE() << "a manifest nested 100,000 levels deep was read";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "is nested deeper than 64 levels");
  }
  EXPECT_EQ(header_problem(R"({"__metadata__":{"x":)" + deep + "}}", 0), "header is nested deeper than 64 levels");
  EXPECT_THROW(SamplerState::from_json(R"({"epoch":)" + deep + "}"), ConfigError);
  EXPECT_FALSE(ckpt::opened_part("", "cohort/ckpt/0/3/1", 0, R"({"rank":)" + deep + "}"));
  // The cap itself: 64 levels are read, 65 are not, and bad syntax is still "not JSON".
  EXPECT_EQ(cohort::detail::parse_capped(nested_arrays(64)).dump(), nested_arrays(64));
  std::string problem;
  EXPECT_TRUE(cohort::detail::parse_capped_or_discarded(nested_arrays(65), &problem).is_discarded());
  EXPECT_EQ(problem, "nested deeper than 64 levels");
  EXPECT_TRUE(cohort::detail::parse_capped_or_discarded(R"({"a":)", &problem).is_discarded());
  EXPECT_EQ(problem, "not JSON");
}

// Bytes cohort does not control (metadata, tensor names, a generated sample) need not be UTF-8:
// nlohmann's dump() throws type_error.316 on them; dump_text writes U+FFFD instead.
TEST(CheckpointHostile, StringsThatAreNotUtf8AreWrittenNotThrown) {
  const std::string latin1 = "caf\xe9 \xb1";  // not UTF-8
  const json sample{{"sample", latin1}};
  EXPECT_THROW((void)sample.dump(), json::type_error);
  EXPECT_EQ(json::parse(cohort::detail::dump_text(sample))["sample"], "caf\xEF\xBF\xBD \xEF\xBF\xBD");
  ckpt::Manifest m = ckpt::Manifest::parse(good_manifest().dump());
  m.metadata["note"] = latin1;
  EXPECT_EQ(ckpt::Manifest::parse(m.to_json()).metadata.at("note"), "caf\xEF\xBF\xBD \xEF\xBF\xBD");
  std::vector<ckpt::TensorEntry> tensors(1);
  tensors[0].name = "w" + latin1;
  tensors[0].dtype = "F32";
  tensors[0].shape = {1};
  const std::string header = ckpt::build_header(tensors, {{"k", latin1}});
  EXPECT_EQ(ckpt::parse_header(header, header.size() + 4).tensors.at(0).name, "wcaf\xEF\xBF\xBD \xEF\xBF\xBD");
}
