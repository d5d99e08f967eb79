#!/bin/sh
# Regenerate the remote-write protobuf modules (and their type stubs) from the trimmed
# Prometheus .proto files, with the protoc that grpcio-tools ships: pip install grpcio-tools.
set -eu
cd "$(dirname "$0")/../src"
dir=gpusteward/integrations/prometheus/remote_write/proto
${PYTHON:-python3} -m grpc_tools.protoc -I . --python_out=. --pyi_out=. "$dir/types.proto" "$dir/remote.proto"
# Kept as protoc writes it (pyproject's ruff excludes it), but for strict mypy on the stubs'
# bare Mapping: the file-level switch goes on top.
for f in "$dir"/*_pb2.pyi; do
  printf '# mypy: disable-error-code="type-arg"\n%s\n' "$(cat "$f")" > "$f"
done
