#!/usr/bin/env bash
# Regenerate the committed gRPC/protobuf modules from src/cuzk/proto/cuzk.proto
# (into src, or into the directory given, which is how tests/test_proto.py checks them).
#
# The generator is pinned, because generated code demands a runtime at least as new as its generator:
# grpcio-tools 1.63.2 (protoc 26) writes protobuf gencode 5.26.1, which runs on protobuf >= 5.26.1 (5.x, 6.x and
# 7.x: it carries no runtime-version check), and a _pb2_grpc.py that only warns below grpcio 1.63.2 — the
# ranges pyproject declares (tested at their lowest). A newer grpcio-tools would raise both floors to its own
# versions. grpcio-tools 1.63 requires protobuf < 6, so it runs in a venv of its own, .gen-proto-venv (made on
# first use; $PYTHON overrides it with an interpreter that already has the pinned grpcio-tools).
# Users of the package need only grpcio + protobuf.
set -euo pipefail
cd "$(dirname "$0")/.."
GRPC_TOOLS=1.63.2
if [ -z "${PYTHON:-}" ]; then
  PYTHON=.gen-proto-venv/bin/python
  if ! "$PYTHON" -c "import grpc_tools" 2>/dev/null; then
    python3 -m venv .gen-proto-venv
    "$PYTHON" -m pip install -q "grpcio-tools==$GRPC_TOOLS"
  fi
fi
have=$("$PYTHON" -c "from importlib.metadata import version; print(version('grpcio-tools'))")
if [ "$have" != "$GRPC_TOOLS" ]; then
  echo "gen_proto.sh: $PYTHON has grpcio-tools $have; the modules are generated with $GRPC_TOOLS (see the comment above)" >&2
  exit 3
fi
OUT=${1:-src}
"$PYTHON" -m grpc_tools.protoc -I src --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" src/cuzk/proto/cuzk.proto
