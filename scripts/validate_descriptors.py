"""Writes the descriptor set of ``buf/validate/validate.proto`` (and the well-known files it
imports) from the installed protovalidate wheel, for protoc's ``--descriptor_set_in``.

The wheel ships validate.proto compiled only, so there is no source for protoc or buf to
read offline; its serialized descriptor is the same contract. The set is a build product
(``build/``, not committed): scripts/generate.sh and ``make lint`` write it again.

    .venv/bin/python scripts/validate_descriptors.py build/validate.binpb
"""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf import descriptor_pb2, duration_pb2, field_mask_pb2, timestamp_pb2
from protovalidate._gen.buf.validate import validate_pb


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    validate = descriptor_pb2.FileDescriptorProto.FromString(validate_pb.desc().proto.to_binary())
    files = descriptor_pb2.FileDescriptorSet()
    for module in (descriptor_pb2, duration_pb2, field_mask_pb2, timestamp_pb2):
        module.DESCRIPTOR.CopyToProto(files.file.add())
    known = {f.name for f in files.file}
    missing = set(validate.dependency) - known
    if missing:
        raise SystemExit(f"validate_descriptors: validate.proto imports {sorted(missing)}, not in the set")
    files.file.append(validate)
    return files


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "build/validate.binpb")
    out.parent.mkdir(parents=True, exist_ok=True)
    data = descriptor_set().SerializeToString(deterministic=True)
    if not out.exists() or out.read_bytes() != data:
        out.write_bytes(data)


if __name__ == "__main__":
    main()
