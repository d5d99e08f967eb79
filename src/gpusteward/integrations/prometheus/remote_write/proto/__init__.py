"""protoc's modules for the remote-write messages (``scripts/gen-remote-write-proto.sh``)."""
