// Private to kernels/cpu: function multi-versioning for hot elementwise loops.
#pragma once

// PARALAB_SIMD_CLONES before a function definition makes GCC compile it three times, for
// x86-64-v4 (AVX-512), x86-64-v3 (AVX2) and the baseline, and pick one at load time for the
// machine it runs on (an ifunc). The package stays portable while a loop over vmath runs 16
// lanes wide where the CPU has them. Without contraction (ISO C++, -ffp-contract=off) every
// version computes the same IEEE operations, so results do not depend on the machine.
// PARALAB_NO_SIMD_CLONES (CMake -DPARALAB_SIMD_CLONES=OFF) compiles the baseline only: a
// ThreadSanitizer build needs it, because the dynamic loader runs ifunc resolvers while it
// relocates the program, before TSan's runtime is up, and GCC instruments the resolvers too
// (their __tsan_func_entry crashes the program before main).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(PARALAB_NO_SIMD_CLONES)
#define PARALAB_SIMD_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PARALAB_SIMD_CLONES
#endif
