pragma circom 2.0.0;
// A batch of 16 Poseidon Merkle paths of depth 16, each giving its tree's root: 256 Poseidon(2) hashes and their
// left/right switches, built with --O2 (benchmarks/make_circuits.py): about 62,000 constraints, a 2^16 domain
// (with circom's default --O1, which keeps the linear constraints, 133,000 and 2^18).
include "circomlib/circuits/poseidon.circom";
include "circomlib/circuits/switcher.circom";

template MerkleRoot(depth) {
    signal input leaf;
    signal input siblings[depth];
    signal input index_bits[depth];  // 1: the running node is the right child at that level
    signal output root;
    component order[depth];
    component hash[depth];
    for (var i = 0; i < depth; i++) {
        index_bits[i] * (1 - index_bits[i]) === 0;
        order[i] = Switcher();
        order[i].sel <== index_bits[i];
        order[i].L <== (i == 0) ? leaf : hash[i - 1].out;
        order[i].R <== siblings[i];
        hash[i] = Poseidon(2);
        hash[i].inputs[0] <== order[i].outL;
        hash[i].inputs[1] <== order[i].outR;
    }
    root <== hash[depth - 1].out;
}

template MerkleBatch(paths, depth) {
    signal input leaves[paths];
    signal input siblings[paths][depth];
    signal input index_bits[paths][depth];
    signal output roots[paths];
    component path[paths];
    for (var p = 0; p < paths; p++) {
        path[p] = MerkleRoot(depth);
        path[p].leaf <== leaves[p];
        path[p].siblings <== siblings[p];
        path[p].index_bits <== index_bits[p];
        roots[p] <== path[p].root;
    }
}

component main {public [leaves]} = MerkleBatch(16, 16);
