#!/usr/bin/env bash
# Regenerates every client stub from proto/ (deterministic and idempotent):
#   Python      -> clients/python/testament/<svc>/v1/   (import testament.<svc>.v1.<file>_pb2)
#   TypeScript  -> clients/typescript/src/gen/           (buf.gen.yaml, protoc-gen-es)
# Run from anywhere; it works from the repo root. Needs .venv (grpcio-tools,
# mypy-protobuf) and node_modules (@bufbuild/buf, @bufbuild/protoc-gen-es).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export LC_ALL=C

PY_OUT="clients/python"
TS_OUT="clients/typescript/src/gen"
PYTHON=".venv/bin/python"
BUF="node_modules/.bin/buf"

for tool in "$PYTHON" "$BUF" node_modules/.bin/protoc-gen-es .venv/bin/protoc-gen-mypy .venv/bin/protoc-gen-mypy_grpc; do
  if [[ ! -x "$tool" ]]; then
    echo "generate.sh: missing $tool (create .venv with the dev extras and run npm ci)" >&2
    exit 1
  fi
done

# ---------------------------------------------------------------------------
# Python
# ---------------------------------------------------------------------------
mapfile -t protos < <(find proto/testament -type f -name '*.proto' | sort)
if [[ ${#protos[@]} -eq 0 ]]; then
  echo "generate.sh: no protos under proto/testament" >&2
  exit 1
fi

# Remove stale generated files (only generated ones: *_pb2*.py / *.pyi under
# testament/*/v1*/); hand-written files elsewhere in the package are kept.
# Remembers which package directories held generated code, so only those can
# be pruned below.
stale_dirs=()
if [[ -d "$PY_OUT/testament" ]]; then
  mapfile -t stale_files < <(
    find "$PY_OUT/testament" -mindepth 3 -maxdepth 3 -type f \
      \( -name '*_pb2.py' -o -name '*_pb2.pyi' -o -name '*_pb2_grpc.py' -o -name '*_pb2_grpc.pyi' \) \
      -path "$PY_OUT/testament/*/v*/*" | sort
  )
  if [[ ${#stale_files[@]} -gt 0 ]]; then
    mapfile -t stale_dirs < <(for f in "${stale_files[@]}"; do dirname "$f"; done | sort -u)
    rm -f "${stale_files[@]}"
  fi
fi

# google/api and google/rpc are imported, not generated: at runtime they come
# from the googleapis-common-protos package. buf/validate/validate.proto has no source
# here: protoc reads the protovalidate wheel's descriptor (scripts/validate_descriptors.py),
# and its Python module is generated beside ours (clients/python/buf/validate/), because
# the wheel's own copy is for another protobuf runtime and every *_pb2 importing the
# rules needs it in google.protobuf's pool.
VALIDATE_SET="build/validate.binpb"
"$PYTHON" scripts/validate_descriptors.py "$VALIDATE_SET"
rm -rf "$PY_OUT/buf"
# mypy-protobuf logs every file it writes to stderr; keep only real messages.
protoc_log="$(mktemp)"
trap 'rm -f "$protoc_log"' EXIT
if ! PATH="$PWD/.venv/bin:$PATH" "$PYTHON" -m grpc_tools.protoc \
  --descriptor_set_in="$VALIDATE_SET" \
  -I proto \
  -I third_party/googleapis \
  --python_out="$PY_OUT" \
  --grpc_python_out="$PY_OUT" \
  --mypy_out="$PY_OUT" \
  --mypy_grpc_out="$PY_OUT" \
  "${protos[@]#proto/}" buf/validate/validate.proto 2>"$protoc_log"; then
  cat "$protoc_log" >&2
  exit 1
fi
grep -v '^Writing mypy to ' "$protoc_log" >&2 || true
rm -f "$PY_OUT"/buf/validate/validate_pb2_grpc.py*   # no services there
: > "$PY_OUT/buf/__init__.py"
: > "$PY_OUT/buf/validate/__init__.py"

# Package markers for testament/<svc>/ and testament/<svc>/v1/ (never
# testament/__init__.py, which is hand-written). Empty, created only if missing.
mapfile -t pkg_dirs < <(
  for f in "${protos[@]}"; do
    rel="$(dirname "${f#proto/}")"        # testament/<svc>/v1
    echo "$PY_OUT/$rel"
    echo "$PY_OUT/$(dirname "$rel")"      # testament/<svc>
  done | sort -u
)
for dir in "${pkg_dirs[@]}"; do
  [[ -f "$dir/__init__.py" ]] || : > "$dir/__init__.py"
done

# Prune packages that held generated code but whose protos were removed: a
# version package left with only an empty __init__.py, then its service
# package if that is left the same way. Nothing else is ever removed.
prune_if_empty() {
  local dir="$1" remaining
  [[ -d "$dir" && -f "$dir/__init__.py" && ! -s "$dir/__init__.py" ]] || return 0
  remaining="$(find "$dir" -mindepth 1 -not -path '*/__pycache__*' -not -name '__init__.py' -not -name '__pycache__' | head -n 1)"
  [[ -z "$remaining" ]] && rm -rf "$dir"
  return 0
}
for dir in "${stale_dirs[@]}"; do
  prune_if_empty "$dir"
  prune_if_empty "$(dirname "$dir")"
done

# The Python SDK's typed per-RPC methods, from the descriptors just generated.
"$PYTHON" scripts/gen_sdk.py

# ---------------------------------------------------------------------------
# TypeScript
# ---------------------------------------------------------------------------
# buf reads the image protoc builds (buf cannot compile validate.proto without its source);
# --path keeps the targets to Testament's files, include_imports adds what they import.
rm -rf "$TS_OUT"
bash scripts/proto_image.sh build/proto.binpb
"$BUF" generate build/proto.binpb --path testament

echo "generated: $(find "$PY_OUT/testament" -path '*/__pycache__' -prune -o -name '*_pb2*.py*' -print | wc -l | tr -d ' ') Python files, $(find "$TS_OUT" -name '*.ts' | wc -l | tr -d ' ') TypeScript files"
