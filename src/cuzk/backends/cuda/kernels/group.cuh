// The types of one group's kernels, selected by the prelude: F is Fq for G1 and Fq2 for G2
// (CUZK_G2), bases are affine points over F and sums XYZZ points over F.
#pragma once
#include "ec.cuh"

typedef Fp<FqParams> Fq;
#ifdef CUZK_G2
typedef Fp2<Fq> F;
#else
typedef Fq F;
#endif
typedef Affine<F> Point;
typedef XYZZ<F> Sum;
