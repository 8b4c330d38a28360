"""bench/data/data_peers.py — the peers' side of bench/data/data_peers.sh (issue 46): MosaicML
Streaming's StreamingDataset and torchdata's StatefulDataLoader on the very tokens of the data set
build/bench/data_peers generated (cohort's shards, `--cohort DIR`).

  prepare: writes the MDS copy for Streaming (`--mds DIR`): sample k of cohort's data set (the
           window of seq_len + 1 tokens at k·seq_len inside its shard, docs/data.md "Samples") is
           MDS sample k, one column 'tokens' of ndarray:uint16:(seq_len+1), no compression.
  run streaming|sdl: one epoch at world size 1, then a resume 90 % into it; one JSON line.
    streaming: StreamingDataset(local=MDS, shuffle=True, the default shuffle_algo 'py1e' and block
               size) under its StreamingDataLoader.
    sdl:       StatefulDataLoader(shuffle=True: torchdata's stateful RandomSampler, seeded) over a
               map-style Dataset reading cohort's shard files through numpy memmaps.
    Both: --workers loader worker processes, --batch samples a batch, default collate (uint16
    tensors), converted to int64 in the main process (cohort hands out int64 inputs and targets).

The epoch: the files' pages dropped from the page cache first (as cohort's side does), the time from
creating the loader's iterator to its last batch. The state is taken after 90 % of the batches and
the next batch kept. The resume: pages dropped again, a new dataset and loader built,
load_state_dict, the first batch — the time of those; the batch must equal the kept one, and each of
its rows (and the kept batch's) must be a whole sample of the data set (looked up by its first four
tokens, then compared token by token).
"""
import argparse
import gc
import json
import os
import pickle
import sys
import time
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")


def evict(paths, warm=False):
    if warm:  # DATA_PEERS_CACHE=warm: the script read the files into the page cache before this run
        return
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class CohortTokens:
    """cohort's data set as a list of samples: shard files, samples per shard, their first index."""

    def __init__(self, d, seq_len):
        with open(os.path.join(d, "manifest.json")) as f:
            m = json.load(f)
        assert m["kind"] == "tokens" and m["dtype"] == "uint16", "a uint16 token data set"
        self.paths = [os.path.join(d, s["file"]) for s in m["shards"]]
        self.counts = np.array([(s["items"] - 1) // seq_len for s in m["shards"]], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])
        self.seq_len = seq_len
        self.maps = None  # opened lazily: in each loader worker

    def __len__(self):
        return int(self.starts[-1])

    def window(self, k):
        if self.maps is None:
            self.maps = [np.memmap(p, dtype=np.uint16, mode="r") for p in self.paths]
        s = int(np.searchsorted(self.starts, k, side="right")) - 1
        j = (k - int(self.starts[s])) * self.seq_len
        return self.maps[s][j : j + self.seq_len + 1]

    def keys(self):
        """The first four tokens of every sample as one uint64 each (in sample order)."""
        maps = [np.memmap(p, dtype=np.uint16, mode="r") for p in self.paths]
        out = []
        for mm, n in zip(maps, self.counts):
            rows = np.asarray(mm[: n * self.seq_len]).reshape(n, self.seq_len)[:, :4]
            out.append(np.ascontiguousarray(rows).view(np.uint64).ravel())
        return np.concatenate(out)


class MemmapDataset(torch.utils.data.Dataset):
    """The map-style dataset StatefulDataLoader reads: sample k as a uint16 array."""

    def __init__(self, tokens):
        self.tokens = tokens

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, k):
        return np.array(self.tokens.window(k))


def prepare(args):
    from streaming import MDSWriter

    tokens = CohortTokens(args.cohort, args.seq_len)
    L = args.seq_len + 1
    t = time.monotonic()
    with MDSWriter(out=args.mds, columns={"tokens": f"ndarray:uint16:{L}"}, compression=None) as w:
        for k in range(len(tokens)):
            w.write({"tokens": tokens.window(k)})
    print(json.dumps({"mds_written": len(tokens), "seconds": round(time.monotonic() - t, 1)}), file=sys.stderr)


def make_streaming(args):
    from streaming import StreamingDataLoader, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    ds = StreamingDataset(local=args.mds, batch_size=args.batch, shuffle=True, shuffle_seed=1)
    loader = StreamingDataLoader(ds, batch_size=args.batch, num_workers=args.workers, drop_last=True)
    return loader, lambda b: b["tokens"]


def make_sdl(args, tokens):
    from torchdata.stateful_dataloader import StatefulDataLoader

    g = torch.Generator()
    g.manual_seed(1)
    loader = StatefulDataLoader(MemmapDataset(tokens), batch_size=args.batch, shuffle=True, generator=g,
                                num_workers=args.workers, drop_last=True)
    return loader, lambda b: b


def run(args):
    tokens = CohortTokens(args.cohort, args.seq_len)
    if args.loader == "streaming":
        files = [os.path.join(args.mds, f) for f in sorted(os.listdir(args.mds)) if f.endswith(".mds")]
        make = lambda: make_streaming(args)  # noqa: E731
    else:
        files = tokens.paths
        make = lambda: make_sdl(args, tokens)  # noqa: E731

    evict(files, args.warm)
    loader, field = make()
    steps = len(loader)
    resume_step = steps * 9 // 10
    samples = checksum = 0
    state = kept = None
    t = time.monotonic()
    for step, b in enumerate(loader):
        x = field(b).to(torch.int64)
        if step == resume_step:
            kept = x.clone()
        samples += x.size(0)
        checksum += int(x[0, 0])
        if step + 1 == resume_step:
            state = loader.state_dict()
    epoch_s = time.monotonic() - t
    del loader
    gc.collect()

    evict(files, args.warm)
    t = time.monotonic()
    loader, field = make()
    build_s = time.monotonic() - t
    loader.load_state_dict(state)
    load_s = time.monotonic() - t - build_s
    first = field(next(iter(loader))).to(torch.int64)
    resume_s = time.monotonic() - t
    parts = {"build": build_s, "load_state": load_s, "first_batch": resume_s - build_s - load_s}
    del loader
    gc.collect()

    # Each row of both batches a whole sample of the data set; the resumed batch the kept one.
    keys = tokens.keys()
    order = np.argsort(keys)
    rows_ok = True
    for batch in (kept, first):
        for row in batch.numpy().astype(np.uint16):
            key = np.ascontiguousarray(row[:4]).view(np.uint64)[0]
            i = np.searchsorted(keys, key, sorter=order)
            k = int(order[min(i, len(order) - 1)])
            rows_ok = rows_ok and keys[k] == key and np.array_equal(tokens.window(k), row)
    ok = bool(rows_ok and torch.equal(first, kept))
    versions = {"torch": torch.__version__, "numpy": np.__version__}
    if args.loader == "streaming":
        import streaming

        versions["mosaicml-streaming"] = streaming.__version__
    else:
        from importlib.metadata import version

        versions["torchdata"] = version("torchdata")
    print(json.dumps({"loader": args.loader, "workers": args.workers, "page_cache": "warm" if args.warm else "cold",
                      "samples": samples, "epoch_s": epoch_s,
                      "samples_per_s": samples / epoch_s, "resume_step": resume_step, "resume_s": resume_s,
                      "resume_parts_s": parts,
                      "state_bytes": len(pickle.dumps(state)), "resumed_batch_ok": ok, "checksum": checksum,
                      "versions": versions}), flush=True)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["prepare", "run"])
    ap.add_argument("loader", nargs="?", choices=["streaming", "sdl"])
    ap.add_argument("--cohort", required=True, help="cohort's data set (build/bench/data_peers --generate)")
    ap.add_argument("--mds", required=True, help="the MDS copy for Streaming")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--warm", action="store_true", help="leave the files' pages in the page cache")
    args = ap.parse_args()
    if args.what == "prepare":
        prepare(args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
