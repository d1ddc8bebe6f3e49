"""Generated protobuf/gRPC modules for cuzk.proto (regenerate with scripts/gen_proto.sh)."""

# Opens the daemon's refusal of a SubmitProofRequest.witness_path (a TCP listener, the setting off, a file it
# cannot open), so that a client can tell it apart and send the witness bytes instead.
WITNESS_PATH_REFUSED = "witness_path refused"
