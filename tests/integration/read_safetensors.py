"""An independent safetensors reader (json + struct only) checking cohort's model file.

usage: read_safetensors.py [--package] FILE.safetensors EXPECTED.json
Reads every tensor of FILE by the safetensors specification and compares its values with
EXPECTED.json ({name: [values]}, written from the live model by tests/integration/ckpt_probe.cpp).
With --package, FILE is read by Python's safetensors package (safetensors.torch.load_file) instead:
the reader PyTorch users have. Exits 0 when every tensor is present with exactly the expected
values, 1 otherwise.
"""
import json
import struct
import sys

FORMATS = {"F64": "d", "F32": "f", "F16": "e", "I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B", "BOOL": "?"}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        fmt = FORMATS[entry["dtype"]]
        count = (end - begin) // struct.calcsize(fmt)
        expected_count = 1
        for d in entry["shape"]:
            expected_count *= d
        assert count == expected_count, f"{name}: {count} values for shape {entry['shape']}"
        tensors[name] = list(struct.unpack(f"<{count}{fmt}", body[begin:end]))
    assert len(body) == max((e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"), default=0)
    return tensors, header.get("__metadata__", {})


def read_with_package(path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(path, framework="pt") as f:
        metadata = f.metadata() or {}
    return {name: t.flatten().tolist() for name, t in load_file(path).items()}, metadata


def main():
    args = sys.argv[1:]
    package = args[0] == "--package"
    if package:
        args = args[1:]
    tensors, metadata = (read_with_package if package else read)(args[0])
    with open(args[1]) as f:
        expected = json.load(f)
    bad = []
    for name, values in expected.items():
        got = tensors.get(name)
        if got is None:
            bad.append(f"{name}: missing")
        elif [float(v) for v in got] != [float(v) for v in values]:
            bad.append(f"{name}: {got} != {values}")
    extra = set(tensors) - set(expected)
    if extra:
        bad.append(f"unexpected tensors {sorted(extra)}")
    if bad:
        print("MISMATCH: " + "; ".join(bad))
        return 1
    print(f"ok: {len(tensors)} tensors equal{' (safetensors package)' if package else ''}, metadata {metadata}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
