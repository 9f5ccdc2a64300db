#!/usr/bin/env bash
# Regenerate rmq_spark/protocol/v1 and broker_sim/protocol/rocketmq_v2 from protos/ (grpcio-tools is pinned in pyproject.toml's test extra).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
python=${PYTHON:-.venv/bin/python}
"$python" -m grpc_tools.protoc -I protos --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  protos/rmq_spark/protocol/v1/*.proto protos/broker_sim/protocol/rocketmq_v2/*.proto
