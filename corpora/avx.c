/* SIMD memory ops: AVX2 aligned/unaligned/masked loads+stores and gathers, plus a CPU-gated AVX-512 masked/gather/scatter section. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { N = 1024, TAIL = 1003, TAB = 4096, SENTINEL = 0x7777 };

static float fa[N] __attribute__((aligned(32)));
static float fb[N] __attribute__((aligned(32)));
static float fc[N] __attribute__((aligned(32)));
static float fm[N + 8];                 /* masked-off lanes past TAIL must not be read */
static int ibuf[N + 16];
static int itab[TAB + 64];              /* itab[TAB..] are sentinels only masked-off lanes point at */
static double dtab[TAB];

static uint64_t hash(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h;
}
#define H0 14695981039346656037ULL

static void init(void)
{
    for (int i = 0; i < N; i++) {
        fa[i] = (float)(i % 97) * 0.25f;
        fb[i] = (float)(i % 13) - 6.0f;
        fm[i] = (float)i;
        ibuf[i] = i * 7 - 300;
    }
    for (int i = N; i < N + 8; i++) fm[i] = 1e9f;
    for (int i = 0; i < TAB; i++) { itab[i] = i * 3 + 1; dtab[i] = i * 0.5; }
    for (int i = TAB; i < TAB + 64; i++) itab[i] = SENTINEL;
}

static void avx2_aligned_fma(void)
{
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < N; i += 8) {
        __m256 a = _mm256_load_ps(fa + i), b = _mm256_load_ps(fb + i);
        acc = _mm256_fmadd_ps(a, b, acc);
        _mm256_store_ps(fc + i, _mm256_add_ps(a, b));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    double dot = 0;
    for (int i = 0; i < 8; i++) dot += lanes[i];
    printf("avx: aligned dot=%.2f store_hash=%016llx\n", dot, (unsigned long long)hash(fc, sizeof fc, H0));
}

static void avx2_unaligned(void)
{
    int out[N + 16];
    memset(out, 0, sizeof out);
    for (int i = 0; i + 8 <= N; i += 8) {  /* load at +1 element, store at +3: never 32-byte aligned */
        __m256i v = _mm256_loadu_si256((const __m256i *)(ibuf + i + 1));
        v = _mm256_add_epi32(v, _mm256_set1_epi32(5));
        _mm256_storeu_si256((__m256i *)(out + i + 3), v);
    }
    printf("avx: unaligned hash=%016llx\n", (unsigned long long)hash(out, sizeof out, H0));
}

static void avx2_masked(void)
{
    float out[N + 8];
    for (int i = 0; i < N + 8; i++) out[i] = -1.0f;
    __m256 sum = _mm256_setzero_ps();
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i alt = _mm256_setr_epi32(-1, 0, -1, 0, -1, 0, -1, 0);
    for (int i = 0; i < TAIL; i += 8) {
        /* lanes i+k >= TAIL are masked off (memory there holds 1e9 sentinels) */
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(TAIL - i), lane);
        __m256 v = _mm256_maskload_ps(fm + i, m);
        sum = _mm256_add_ps(sum, v);
        _mm256_maskstore_ps(out + i, _mm256_and_si256(m, alt), v); /* store every other lane */
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    double s = 0;
    for (int i = 0; i < 8; i++) s += lanes[i];
    printf("avx: maskload sum=%.1f maskstore_hash=%016llx\n", s, (unsigned long long)hash(out, sizeof out, H0));
}

static void avx2_gathers(void)
{
    __m256i isum = _mm256_setzero_si256(), msum = _mm256_setzero_si256();
    __m256d dsum = _mm256_setzero_pd();
    const __m256i limit = _mm256_set1_epi32(TAB / 2);
    for (int r = 0; r < 256; r++) {
        __m256i idx = _mm256_setr_epi32(r, r * 7 + 1, r * 13 + 2, r * 31 + 3,
                                        r * 5 + 4, r * 11 + 5, r * 17 + 6, r * 3 + 7);
        idx = _mm256_and_si256(idx, _mm256_set1_epi32(TAB - 1));
        isum = _mm256_add_epi32(isum, _mm256_i32gather_epi32(itab, idx, 4));

        /* mask variant: lanes with idx >= TAB/2 are masked off and redirected at sentinels */
        __m256i m = _mm256_cmpgt_epi32(limit, idx);
        __m256i bad = _mm256_add_epi32(_mm256_set1_epi32(TAB), _mm256_and_si256(idx, _mm256_set1_epi32(63)));
        __m256i midx = _mm256_blendv_epi8(bad, idx, m);
        msum = _mm256_add_epi32(msum, _mm256_mask_i32gather_epi32(_mm256_set1_epi32(-1), itab, midx, m, 4));

        __m256i didx = _mm256_setr_epi64x(r * 9 % TAB, (r * 23 + 100) % TAB, (r * 41 + 7) % TAB, (TAB - 1 - r));
        dsum = _mm256_add_pd(dsum, _mm256_i64gather_pd(dtab, didx, 8));
    }
    int il[8], ml[8];
    double dl[4];
    _mm256_storeu_si256((__m256i *)il, isum);
    _mm256_storeu_si256((__m256i *)ml, msum);
    _mm256_storeu_pd(dl, dsum);
    long long is = 0, ms = 0;
    for (int i = 0; i < 8; i++) { is += il[i]; ms += ml[i]; }
    printf("avx: gather32 sum=%lld maskgather32 sum=%lld gather64pd sum=%.1f\n", is, ms, dl[0] + dl[1] + dl[2] + dl[3]);
}

/* ---- AVX-512 section: same results computed by avx512_kernel (if supported) or scalar_kernel ---- */

enum { CH = 4, FS = 16 * CH, IS = 64 * CH };

struct k_out { float fdst[FS]; int idst[IS + 1]; int gsum; };

static unsigned k_mask(int c)  { return (0xA5A5u ^ (unsigned)(c * 0x1111)) & 0xFFFF; }
static unsigned k_mask2(int c) { return 0x0FF0u | (unsigned)c; }
static int k_gidx(int c, int l) { return (l * 37 + c * 11) & (TAB - 1); }
static int k_sidx(int c, int l) { return c * 64 + ((l * 5 + c) & 15) * 4; } /* a permutation: no duplicate lanes */

static void k_init(struct k_out *o)
{
    for (int i = 0; i < FS; i++) o->fdst[i] = -1.0f;
    memset(o->idst, 0, sizeof o->idst);
    o->gsum = 0;
}

static void scalar_kernel(const float *fsrc, struct k_out *o)
{
    k_init(o);
    for (int c = 0; c < CH; c++) {
        unsigned m = k_mask(c), m2 = k_mask2(c);
        int g[16], mg[16];
        for (int l = 0; l < 16; l++) {
            float v = (m >> l & 1) ? fsrc[16 * c + l] : -2.0f;
            if (m2 >> l & 1) o->fdst[16 * c + l] = v;
            g[l] = itab[k_gidx(c, l)];
            mg[l] = (m >> l & 1) ? itab[k_gidx(c, l)] : -7;
            o->gsum += g[l];
        }
        for (int l = 0; l < 16; l++) o->idst[k_sidx(c, l)] = g[l] + mg[l];
        for (int l = 0; l < 16; l++) if (m >> l & 1) o->idst[1 + k_sidx(c, l)] = mg[l];
    }
}

__attribute__((target("avx512f"), noinline))
static void avx512_kernel(const float *fsrc, struct k_out *o)
{
    k_init(o);
    __m512i gacc = _mm512_setzero_si512();
    for (int c = 0; c < CH; c++) {
        __mmask16 m = (__mmask16)k_mask(c), m2 = (__mmask16)k_mask2(c);
        __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-2.0f), m, fsrc + 16 * c);
        _mm512_mask_storeu_ps(o->fdst + 16 * c, m2, v);

        int gi[16], si[16];
        for (int l = 0; l < 16; l++) { gi[l] = k_gidx(c, l); si[l] = k_sidx(c, l); }
        __m512i gidx = _mm512_loadu_si512(gi), sidx = _mm512_loadu_si512(si);
        __m512i g = _mm512_i32gather_epi32(gidx, itab, 4);
        __m512i mg = _mm512_mask_i32gather_epi32(_mm512_set1_epi32(-7), m, gidx, itab, 4);
        gacc = _mm512_add_epi32(gacc, g);
        _mm512_i32scatter_epi32(o->idst, sidx, _mm512_add_epi32(g, mg), 4);
        _mm512_mask_i32scatter_epi32(o->idst + 1, m, sidx, mg, 4);
    }
    o->gsum = _mm512_reduce_add_epi32(gacc);
}

static void avx512_section(void)
{
    float fsrc[FS];
    for (int i = 0; i < FS; i++) fsrc[i] = (float)(i * 3) - 50.0f;
    static struct k_out ref, got;
    scalar_kernel(fsrc, &ref);
    if (__builtin_cpu_supports("avx512f")) {
        avx512_kernel(fsrc, &got);
        if (memcmp(&ref, &got, sizeof ref) != 0) {
            printf("avx: AVX-512 result MISMATCH\n");
            return;
        }
    }
    uint64_t h = hash(ref.fdst, sizeof ref.fdst, H0);
    h = hash(ref.idst, sizeof ref.idst, h);
    printf("avx: avx512-section gsum=%d hash=%016llx\n", ref.gsum, (unsigned long long)h);
}

int main(void)
{
    init();
    avx2_aligned_fma();
    avx2_unaligned();
    avx2_masked();
    avx2_gathers();
    avx512_section();
    return 0;
}
