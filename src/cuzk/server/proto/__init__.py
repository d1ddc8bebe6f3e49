"""Generated protobuf/gRPC modules for cuzk.proto (regenerate with scripts/gen_proto.sh)."""
