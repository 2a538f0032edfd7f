#!/usr/bin/env bash
# Builds the contract's image (a FileDescriptorSet with imports and source info) with protoc:
#   scripts/proto_image.sh OUT [ROOT]
# ROOT (default: the repo) holds proto/ and third_party/googleapis/. buf/validate/validate.proto
# comes from the installed protovalidate wheel's descriptor (scripts/validate_descriptors.py),
# not from source, so buf lint, buf breaking and buf generate read this image instead of
# compiling the workspace themselves.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export LC_ALL=C
PYTHON="$PWD/.venv/bin/python"
out="$(realpath -m "$1")"
root="$(realpath "${2:-.}")"
validate="$PWD/build/validate.binpb"

"$PYTHON" scripts/validate_descriptors.py "$validate"
mkdir -p "$(dirname "$out")"
cd "$root"
mapfile -t protos < <(cd proto && find testament -type f -name '*.proto' | sort)
"$PYTHON" -m grpc_tools.protoc --descriptor_set_in="$validate" -I proto -I third_party/googleapis \
  --include_imports --include_source_info --descriptor_set_out="$out" "${protos[@]}"
