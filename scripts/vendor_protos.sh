#!/usr/bin/env bash
# Vendors the googleapis protos Testament imports out of the installed
# googleapis-common-protos wheel into third_party/googleapis, so buf works
# offline and `buf breaking` can read them from git. Run from the repo root:
#   scripts/vendor_protos.sh
# The copied files are committed; re-run after upgrading the wheel.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
DEST="third_party/googleapis"

# google.api / google.rpc are namespace packages (no __file__), so locate the
# wheel through a concrete generated module in each.
api_dir="$("$PYTHON" -c 'import google.api.annotations_pb2 as m, os; print(os.path.dirname(m.__file__))')"
rpc_dir="$("$PYTHON" -c 'import google.rpc.status_pb2 as m, os; print(os.path.dirname(m.__file__))')"

copy() {
  local src_dir="$1" pkg="$2"
  shift 2
  mkdir -p "$DEST/google/$pkg"
  for name in "$@"; do
    if [[ ! -f "$src_dir/$name.proto" ]]; then
      echo "vendor_protos: $src_dir/$name.proto not found in googleapis-common-protos" >&2
      exit 1
    fi
    install -m 0644 "$src_dir/$name.proto" "$DEST/google/$pkg/$name.proto"
  done
}

rm -rf "$DEST/google"
copy "$api_dir" api annotations http field_behavior
copy "$rpc_dir" rpc status error_details code

version="$("$PYTHON" -c 'import importlib.metadata as md; print(md.version("googleapis-common-protos"))')"
cat > "$DEST/README.md" <<README
Vendored from the googleapis-common-protos ${version} wheel by scripts/vendor_protos.sh.
Do not edit by hand; re-run the script instead. Excluded from buf lint and breaking.
README

echo "vendored googleapis-common-protos ${version} into $DEST"
