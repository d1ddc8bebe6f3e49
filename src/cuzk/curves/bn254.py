"""BN254 (alt_bn128, snarkjs "bn128"): constants only."""

from .curve import Curve
from .ec import WeierstrassGroup
from .field import PrimeField, QuadraticExtension

Q = 21888242871839275222246405745257275088696311157297823662689037894645226208583
R = 21888242871839275222246405745257275088548364400416034343698204186575808495617

Fq = PrimeField(Q, 32)
Fr = PrimeField(R, 32)
Fq2 = QuadraticExtension(Fq, Q - 1)

# Twist coefficient b' = 3 / (9 + u) (D-type sextic twist).
_B2 = Fq2.mul((3, 0), Fq2.inv((9, 1)))

G1 = WeierstrassGroup("G1", Fq, 3, (1, 2), R, 1)
G2 = WeierstrassGroup(
    "G2",
    Fq2,
    _B2,
    (
        (
            10857046999023057135944570762232829481370756359578518086990519993285655852781,
            11559732032986387107991004021392285783925812861821192530917403151452391805634,
        ),
        (
            8495653923123431417604973247489272438418190587263600148770280649306958101930,
            4082367875863433681332203403145435568316851327593401208105741076214120093531,
        ),
    ),
    R,
    2 * Q - R,  # the twist has r·(2q − r) points
)

BN254 = Curve(
    name="bn128",
    Fq=Fq,
    Fr=Fr,
    Fq2=Fq2,
    G1=G1,
    G2=G2,
    family="bn",
    param=4965661367192848881,
    twist="D",
    aliases=("bn254", "alt_bn128", "bn128"),
)
