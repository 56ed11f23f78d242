/* AVX-512 memory forms a tracer must instrument and recover: gathers (dword and qword
 * indices; full, partial and zero masks; 512-, 256- and 128-bit, and an index in xmm17),
 * scatters (full, partial, zero mask), vpcompressd/vpexpandd to and from memory, masked
 * loads and stores (a zero-mask store aimed at a PROT_NONE page must not fault).
 * Results are compared with a scalar reference and only the reference is printed, so the
 * output is the same on every CPU; without AVX-512F+VL the program says so on stdout. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

enum { TAB = 4096, ROUNDS = 64 };

static int itab[TAB];
static double dtab[TAB];

struct out {
    long long gsum, pgsum, zgsum, qgsum, vlsum, hisum;
    int scat[1024];
    int comp[16 * ROUNDS + 16];
    int expd[16 * ROUNDS];
    int mstore[16 * ROUNDS];
};

static uint64_t hash(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h;
}

static unsigned mask_of(int r) { return (0x9C3Au * (unsigned)(r + 1)) & 0xFFFF; }
static int idx_of(int r, int l) { return (l * 97 + r * 31) & (TAB - 1); }
static int sidx_of(int r, int l) { return ((l * 7 + r) & 15) * 64 + (r & 63); } /* distinct per r */

static void scalar(struct out *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < (int)(sizeof o->comp / sizeof o->comp[0]); i++) o->comp[i] = -1;
    int cpos = 0;
    for (int r = 0; r < ROUNDS; r++) {
        unsigned m = mask_of(r);
        for (int l = 0; l < 16; l++) {
            int g = itab[idx_of(r, l)];
            o->gsum += g;
            o->pgsum += (m >> l & 1) ? g : -3;
            o->zgsum += -5;
            o->scat[sidx_of(r, l)] = g + r;
            if (m >> l & 1) o->comp[cpos++] = g ^ r;
        }
        for (int l = 0; l < 8; l++) o->qgsum += (long long)dtab[idx_of(r, l)];
        for (int l = 0; l < 8; l++) o->vlsum += (m >> l & 1) ? itab[idx_of(r, l)] : 11;
        for (int l = 0; l < 4; l++) o->vlsum += (m >> (l + 8) & 1) ? itab[idx_of(r, l + 8)] : 13;
        for (int l = 0; l < 4; l++) o->hisum += itab[idx_of(r, l)];
        /* expand: active lanes take consecutive source elements, others keep -9 */
        int e = 0;
        for (int l = 0; l < 16; l++) o->expd[16 * r + l] = (m >> l & 1) ? itab[r * 16 + e++] : -9;
        for (int l = 0; l < 16; l++) o->mstore[16 * r + l] = (m >> l & 1) ? r * 100 + l : 0;
    }
}

__attribute__((target("avx512f,avx512vl"), noinline))
static void vector(struct out *o, int *guard)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < (int)(sizeof o->comp / sizeof o->comp[0]); i++) o->comp[i] = -1;
    int *cp = o->comp;
    __m512i gacc = _mm512_setzero_si512(), pacc = _mm512_setzero_si512(), zacc = _mm512_setzero_si512();
    __m512d qacc = _mm512_setzero_pd();
    for (int r = 0; r < ROUNDS; r++) {
        __mmask16 m = (__mmask16)mask_of(r);
        int gi[16], si[16];
        for (int l = 0; l < 16; l++) { gi[l] = idx_of(r, l); si[l] = sidx_of(r, l); }
        __m512i gidx = _mm512_loadu_si512(gi), sidx = _mm512_loadu_si512(si);

        __m512i g = _mm512_i32gather_epi32(gidx, itab, 4);                                  /* full mask */
        __m512i pg = _mm512_mask_i32gather_epi32(_mm512_set1_epi32(-3), m, gidx, itab, 4);  /* partial */
        __m512i zg = _mm512_mask_i32gather_epi32(_mm512_set1_epi32(-5), 0, gidx, itab, 4);  /* zero mask */
        gacc = _mm512_add_epi32(gacc, g);
        pacc = _mm512_add_epi32(pacc, pg);
        zacc = _mm512_add_epi32(zacc, zg);

        __m256i qi = _mm512_castsi512_si256(gidx);
        qacc = _mm512_add_pd(qacc, _mm512_floor_pd(_mm512_i32gather_pd(qi, dtab, 8)));    /* qword data */

        /* 256- and 128-bit opmask gathers (AVX-512VL) */
        __m256i v8 = _mm256_mmask_i32gather_epi32(_mm256_set1_epi32(11), (__mmask8)m, qi, itab, 4);
        __m128i v4 = _mm_mmask_i32gather_epi32(_mm_set1_epi32(13), (__mmask8)(m >> 8),
                                               _mm512_extracti32x4_epi32(gidx, 2), itab, 4);
        int l8[8], l4[4];
        _mm256_storeu_si256((__m256i *)l8, v8);
        _mm_storeu_si128((__m128i *)l4, v4);
        for (int l = 0; l < 8; l++) o->vlsum += l8[l];
        for (int l = 0; l < 4; l++) o->vlsum += l4[l];

        /* an index in xmm17: only EVEX can name it */
        int hi[4];
        __asm__ volatile("vmovdqu32 %[idx], %%xmm17\n\t"
                         "kxnorw %%k0, %%k0, %%k2\n\t"
                         "vpxord %%xmm18, %%xmm18, %%xmm18\n\t"
                         "vpgatherdd (%[tab],%%xmm17,4), %%xmm18%{%%k2%}\n\t"
                         "vmovdqu32 %%xmm18, %[out]"
                         : [out] "=m"(*(int(*)[4])hi)
                         : [idx] "m"(*(const int(*)[4])gi), [tab] "r"(itab)
                         : "xmm17", "xmm18", "k2", "memory");
        for (int l = 0; l < 4; l++) o->hisum += hi[l];

        /* scatters: full, then a zero mask and a partial mask that rewrite the same slots */
        __m512i sv = _mm512_add_epi32(g, _mm512_set1_epi32(r));
        _mm512_i32scatter_epi32(o->scat, sidx, sv, 4);
        _mm512_mask_i32scatter_epi32(o->scat, 0, sidx, _mm512_set1_epi32(-1), 4);
        _mm512_mask_i32scatter_epi32(o->scat, m, sidx, sv, 4);

        /* compress to memory (popcount(m) elements) and expand from memory */
        __m512i cv = _mm512_xor_si512(g, _mm512_set1_epi32(r));
        _mm512_mask_compressstoreu_epi32(cp, m, cv);
        cp += __builtin_popcount(m);
        _mm512_mask_compressstoreu_epi32(cp, 0, cv);                                       /* writes nothing */
        __m512i ev = _mm512_mask_expandloadu_epi32(_mm512_set1_epi32(-9), m, itab + r * 16);
        _mm512_storeu_si512(o->expd + 16 * r, ev);

        /* masked store, and zero-mask accesses aimed at a page that would fault */
        __m512i mv = _mm512_add_epi32(_mm512_set1_epi32(r * 100),
                                      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
        _mm512_mask_storeu_epi32(o->mstore + 16 * r, m, mv);
        _mm512_mask_storeu_epi32(guard, 0, mv);
        zacc = _mm512_add_epi32(zacc, _mm512_maskz_loadu_epi32(0, guard));
    }
    o->gsum = _mm512_reduce_add_epi32(gacc);
    o->pgsum = _mm512_reduce_add_epi32(pacc);
    o->zgsum = _mm512_reduce_add_epi32(zacc);
    o->qgsum = (long long)_mm512_reduce_add_pd(qacc);
}

int main(void)
{
    for (int i = 0; i < TAB; i++) { itab[i] = i * 5 - 700; dtab[i] = i * 0.75; }
    static struct out ref, got;
    scalar(&ref);
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) {
        int *guard = mmap(0, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        vector(&got, guard);
        if (memcmp(&ref, &got, sizeof ref) != 0) {
            printf("avx512: MISMATCH %lld/%lld %lld/%lld %lld/%lld %lld/%lld %lld/%lld %lld/%lld\n", got.gsum, ref.gsum,
                   got.pgsum, ref.pgsum, got.zgsum, ref.zgsum, got.qgsum, ref.qgsum, got.vlsum, ref.vlsum, got.hisum, ref.hisum);
            return 1;
        }
    } else {
        printf("avx512: this CPU lacks AVX-512F/VL: only the scalar reference ran\n");
    }
    printf("avx512: gather %lld partial %lld zero %lld qword %lld vl %lld xmm17 %lld\n", ref.gsum, ref.pgsum, ref.zgsum,
           ref.qgsum, ref.vlsum, ref.hisum);
    uint64_t h = hash(ref.scat, sizeof ref.scat, 14695981039346656037ULL);
    h = hash(ref.comp, sizeof ref.comp, h);
    h = hash(ref.expd, sizeof ref.expd, h);
    h = hash(ref.mstore, sizeof ref.mstore, h);
    printf("avx512: memory hash %016llx\n", (unsigned long long)h);
    return 0;
}
