pragma circom 2.0.0;
// SHA-256 of 64 bytes (two compression blocks with the padding): 62,528 constraints with circom's default --O1, a 2^16 domain.
include "circomlib/circuits/sha256/sha256.circom";

template Sha256Bytes(nBytes) {
    signal input in[nBytes * 8];   // the message, most significant bit of each byte first
    signal output out[256];
    component h = Sha256(nBytes * 8);
    for (var i = 0; i < nBytes * 8; i++) h.in[i] <== in[i];
    for (var i = 0; i < 256; i++) out[i] <== h.out[i];
}

component main = Sha256Bytes(64);
