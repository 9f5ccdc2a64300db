#!/usr/bin/env bash
# Regenerate rmq_wire/contract (our gRPC contract) and rmq_wire/rocketmq_v2 (RocketMQ 5's) from protos/ (grpcio-tools is pinned in pyproject.toml's test extra).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
python=${PYTHON:-.venv/bin/python}
"$python" -m grpc_tools.protoc -I protos --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  protos/rmq_wire/contract/*.proto protos/rmq_wire/rocketmq_v2/*.proto
