// The types of one group's kernels, selected by the prelude: F is Fq for G1 and Fq2 for G2
// (CUZK_G2), bases are affine points over F and sums XYZZ points over F.
#pragma once
#include "ec.cuh"

typedef Fp<FqParams> Fq;
#ifdef CUZK_G2
typedef Fp2<Fq> F;
typedef F HotF;  // Fq2 products stay out of line (fq2.cuh)
#else
typedef Fq F;
typedef Fp<FqParams, true> HotF;
#endif
typedef Affine<F> Point;
typedef XYZZ<F> Sum;
// The same points with every base-field product inline (field.cuh), for the kernels that make nearly all
// of an MSM's additions: same layout, so their buffers are the other kernels' Point and Sum arrays.
typedef Affine<HotF> HotPoint;
typedef XYZZ<HotF> HotSum;
