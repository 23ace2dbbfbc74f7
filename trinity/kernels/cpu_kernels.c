/* Fused CPU kernels for bf16 decoding and the bf16-weights optimizer step.
 *
 * Built at first use by trinity/kernels/__init__.py (gcc -O3 -march=native -fopenmp, or
 * the baseline ISA that TRINITY_KERNEL_MARCH names) and called through ctypes. Results
 * do not depend on the ISA except where a sum's order does (vector widths differ): the
 * elementwise kernels round as their bf16 PyTorch ops do, bit for bit; the norms,
 * log-sum-exps, dot products and softmax sums are float32 sums whose order is not fixed
 * (tests/unit/kernels bound them against float64 for any order). OpenMP here is the libgomp that torch already loaded (same
 * soname), so these loops share torch's thread team instead of starting a second one.
 *
 * bf16 values are uint16_t bit patterns: widening is a shift, narrowing rounds to nearest
 * even (NaN stays NaN), as torch's conversions do.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef uint16_t bf16;

static inline float bf2f(bf16 v) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)v << 16;
    return c.f;
}

static inline bf16 f2bf(float f) {
    union { uint32_t u; float f; } c;
    c.f = f;
    if ((c.u & 0x7fffffffu) > 0x7f800000u) return (bf16)((c.u >> 16) | 0x40u);
    c.u += 0x7fffu + ((c.u >> 16) & 1u);
    return (bf16)(c.u >> 16);
}

/* exp(x) to about 2 ulp of float32 (Cephes' expf polynomial); written out so the loops
 * that call it vectorise without a vector math library. */
static inline float exp_approx(float x) {
    x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}

/* x (rows, dim) += delta when delta is not NULL (each sum rounded to bf16, as a bf16
 * add); then out = x / sqrt(mean(x^2) + eps) * w, computed in float32, rounded once. */
void add_rms_norm(bf16 *x, const bf16 *delta, const bf16 *w, bf16 *out, int64_t rows,
                  int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 8192)
    for (int64_t r = 0; r < rows; r++) {
        bf16 *xr = x + r * dim;
        bf16 *o = out + r * dim;
        float squares = 0.0f;
        if (delta != NULL) {
            const bf16 *d = delta + r * dim;
#pragma omp simd reduction(+ : squares)
            for (int64_t j = 0; j < dim; j++) {
                bf16 s = f2bf(bf2f(xr[j]) + bf2f(d[j]));
                xr[j] = s;
                float v = bf2f(s);
                squares += v * v;
            }
        } else {
#pragma omp simd reduction(+ : squares)
            for (int64_t j = 0; j < dim; j++) {
                float v = bf2f(xr[j]);
                squares += v * v;
            }
        }
        float rstd = 1.0f / sqrtf(squares / (float)dim + eps);
#pragma omp simd
        for (int64_t j = 0; j < dim; j++) o[j] = f2bf(bf2f(xr[j]) * rstd * bf2f(w[j]));
    }
}

/* x cos + y sin rounded as PyTorch's bf16 ops round it: each product (exact in float32)
 * to bf16, then the sum. */
static inline bf16 rope1(bf16 x, bf16 cos, bf16 y, bf16 sin) {
    return f2bf(bf2f(f2bf(bf2f(x) * bf2f(cos))) + bf2f(f2bf(bf2f(y) * bf2f(sin))));
}

/* Rotary embedding of one token per row, and the keys / values written into a cache.
 *
 * qkv: (rows, (heads + 2 kv_heads) * dim), q | k | v per row.
 * cos, sin: (positions, dim) tables; sin has its first half negated, so that
 *   rope(x)[j] = x[j] cos[j] + x[(j + dim/2) % dim] sin[j].
 * q_out: (rows, heads, dim). k_dst, v_dst: the cache at (row 0, kv head 0, this column);
 *   row r, head h lives at + r * row_stride + h * head_stride.
 */
void rope_kv(const bf16 *qkv, const int64_t *positions, const bf16 *cos, const bf16 *sin,
             bf16 *q_out, bf16 *k_dst, bf16 *v_dst, int64_t rows, int64_t heads,
             int64_t kv_heads, int64_t dim, int64_t row_stride, int64_t head_stride) {
    const int64_t half = dim / 2, width = (heads + 2 * kv_heads) * dim;
#pragma omp parallel for schedule(static) if (rows * width > 8192)
    for (int64_t r = 0; r < rows; r++) {
        const bf16 *src = qkv + r * width;
        const bf16 *c = cos + positions[r] * dim, *s = sin + positions[r] * dim;
        for (int64_t h = 0; h < heads + kv_heads; h++) {
            const bf16 *in = src + h * dim;
            bf16 *dst = h < heads ? q_out + (r * heads + h) * dim
                                  : k_dst + r * row_stride + (h - heads) * head_stride;
#pragma omp simd
            for (int64_t j = 0; j < half; j++) {
                dst[j] = rope1(in[j], c[j], in[j + half], s[j]);
                dst[j + half] = rope1(in[j + half], c[j + half], in[j], s[j + half]);
            }
        }
        const bf16 *v = src + (heads + kv_heads) * dim;
        for (int64_t h = 0; h < kv_heads; h++)
            memcpy(v_dst + r * row_stride + h * head_stride, v + h * dim, dim * sizeof(bf16));
    }
}

/* out (rows, inter) = silu(gate) * up, gate_up (rows, 2 inter) = gate | up; silu rounded
 * to bf16 before the product, as two bf16 ops round. */
static void silu_mul_row(const bf16 *restrict g, const bf16 *restrict u, bf16 *restrict o,
                         int64_t n) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
        float a = bf2f(g[j]);
        o[j] = f2bf(bf2f(f2bf(a / (1.0f + exp_approx(-a)))) * bf2f(u[j]));
    }
}

void silu_mul(const bf16 *gate_up, bf16 *out, int64_t rows, int64_t inter) {
#pragma omp parallel for schedule(static) if (rows * inter > 8192)
    for (int64_t r = 0; r < rows; r++)
        silu_mul_row(gate_up + r * 2 * inter, gate_up + r * 2 * inter + inter, out + r * inter,
                     inter);
}

/* One AdamW step (decoupled weight decay, bias-corrected, as torch.optim.AdamW) on n
 * float32 master weights, with the new weights also written rounded into the bf16
 * parameter. The gradient is grad16 (bf16) or grad32 (float32; grad16 NULL), times
 * grad_scale (the clip factor). The caller computes, in double, decay = 1 - lr wd,
 * step_size = lr / (1 - beta1^t) and bias2_sqrt = sqrt(1 - beta2^t). */
void adamw_step(float *master, float *exp_avg, float *exp_avg_sq, const bf16 *grad16,
                const float *grad32, bf16 *param, int64_t n, float beta1, float beta2,
                float eps, float decay, float step_size, float bias2_sqrt, float grad_scale) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float g = (grad16 != NULL ? bf2f(grad16[i]) : grad32[i]) * grad_scale;
        float m = exp_avg[i] + (g - exp_avg[i]) * (1.0f - beta1);
        float v = exp_avg_sq[i] * beta2 + (1.0f - beta2) * g * g;
        float p = master[i] * decay - step_size * m / (sqrtf(v) / bias2_sqrt + eps);
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        master[i] = p;
        param[i] = f2bf(p);
    }
}

/* Log-probabilities of labels under softmax(logits * inv_temp), one (b, t) position per
 * row: logits (B, T, vocab) bf16 with strides (stride_b, stride_t, 1); labels, logprob,
 * lse and entropy (B * T) in row order. lse gets each row's log-sum-exp (for the
 * backward pass); entropy, when not NULL, each row's entropy. */
void logprob_rows(const bf16 *logits, const int64_t *labels, float *logprob, float *lse,
                  float *entropy, int64_t batch, int64_t steps, int64_t vocab,
                  int64_t stride_b, int64_t stride_t, float inv_temp) {
#pragma omp parallel for schedule(static) if (batch * steps * vocab > 65536)
    for (int64_t row = 0; row < batch * steps; row++) {
        const bf16 *x = logits + (row / steps) * stride_b + (row % steps) * stride_t;
        float top = -INFINITY;
#pragma omp simd reduction(max : top)
        for (int64_t j = 0; j < vocab; j++) {
            float z = bf2f(x[j]) * inv_temp;
            top = z > top ? z : top;
        }
        float sum = 0.0f, weighted = 0.0f;
#pragma omp simd reduction(+ : sum, weighted)
        for (int64_t j = 0; j < vocab; j++) {
            float z = bf2f(x[j]) * inv_temp - top;
            float e = exp_approx(z);
            sum += e;
            weighted += e * z;
        }
        float log_sum = logf(sum);
        lse[row] = top + log_sum;
        logprob[row] = bf2f(x[labels[row]]) * inv_temp - lse[row];
        /* H = -sum p log p with p = e / sum and log p = z - log_sum */
        if (entropy != NULL) entropy[row] = log_sum - weighted / sum;
    }
}

/* The gradient of logprob_rows' logprob with respect to the logits: for each row,
 * grad[row] * (onehot(label) - softmax) * inv_temp, written as bf16 into grad_logits
 * (B * T, vocab) contiguous. */
void logprob_rows_backward(const bf16 *logits, const int64_t *labels, const float *lse,
                           const float *grad, bf16 *grad_logits, int64_t batch,
                           int64_t steps, int64_t vocab, int64_t stride_b, int64_t stride_t,
                           float inv_temp) {
#pragma omp parallel for schedule(static) if (batch * steps * vocab > 65536)
    for (int64_t row = 0; row < batch * steps; row++) {
        const bf16 *x = logits + (row / steps) * stride_b + (row % steps) * stride_t;
        bf16 *out = grad_logits + row * vocab;
        const float scale = -grad[row] * inv_temp, shift = lse[row];
#pragma omp simd
        for (int64_t j = 0; j < vocab; j++)
            out[j] = f2bf(scale * exp_approx(bf2f(x[j]) * inv_temp - shift));
        const int64_t label = labels[row];
        float p = exp_approx(bf2f(x[label]) * inv_temp - shift);
        out[label] = f2bf(grad[row] * inv_temp * (1.0f - p));
    }
}

/* Training: transformers' Llama-family SwiGLU product and RMS norm in bf16, forward and
 * backward, each rounded where their bf16 PyTorch ops round. One pass each instead of
 * two to ten elementwise ops, and the SwiGLU saves two tensors for backward, not three. */

/* exp_approx with fused multiply-adds: about half the instructions. The training
 * kernels use it (their forward and backward need not agree to the last bit, unlike
 * logprob_rows and its backward). */
static inline float exp_fma(float x) {
    x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
    float n = floorf(fmaf(x, 1.44269504088896341f, 0.5f));
    float r = fmaf(n, 2.12194440e-4f, fmaf(n, -0.693359375f, x));
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p * r, r, r + 1.0f);
    union { int32_t i; float f; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}

/* out = silu(gate) * up over n elements; silu rounded to bf16 before the product. */
void swiglu_forward(const bf16 *gate, const bf16 *up, bf16 *out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float a = bf2f(gate[i]);
        out[i] = f2bf(bf2f(f2bf(a / (1.0f + exp_fma(-a)))) * bf2f(up[i]));
    }
}

/* Gradients of swiglu_forward for the output gradient grad: grad_up = grad * silu(gate),
 * grad_gate = silu'(gate) * (grad * up), silu'(a) = s (1 + a (1 - s)) with s = sigmoid(a);
 * the products rounded to bf16 as autograd's bf16 multiplications round them. */
void swiglu_backward(const bf16 *grad, const bf16 *gate, const bf16 *up, bf16 *grad_gate,
                     bf16 *grad_up, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float a = bf2f(gate[i]), g = bf2f(grad[i]);
        float e = 1.0f + exp_fma(-a);
        float s = 1.0f / e;
        grad_up[i] = f2bf(g * bf2f(f2bf(a / e)));
        float gs = bf2f(f2bf(g * bf2f(up[i])));
        grad_gate[i] = f2bf(gs * s * (1.0f + a * (1.0f - s)));
    }
}

/* y = w * bf16(x r) with r = 1 / sqrt(mean(x^2) + eps) per row in float32, as
 * transformers' LlamaRMSNorm computes it in bf16; rstd gets each row's r. */
void rms_norm_forward(const bf16 *x, const bf16 *w, bf16 *y, float *rstd, int64_t rows,
                      int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 65536)
    for (int64_t r = 0; r < rows; r++) {
        const bf16 *xr = x + r * dim;
        bf16 *yr = y + r * dim;
        float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
        for (int64_t j = 0; j < dim; j++) {
            float v = bf2f(xr[j]);
            squares += v * v;
        }
        float rs = 1.0f / sqrtf(squares / (float)dim + eps);
        rstd[r] = rs;
#pragma omp simd
        for (int64_t j = 0; j < dim; j++) yr[j] = f2bf(bf2f(w[j]) * bf2f(f2bf(bf2f(xr[j]) * rs)));
    }
}

/* Gradients of rms_norm_forward for the output gradient gy. With g = bf16(gy * w) (the
 * gradient reaching x r): grad_x = bf16(r g - x r^3 mean(g x)); grad_w (dim) float32 =
 * the sum over rows of gy * bf16(x r). */
void rms_norm_backward(const bf16 *gy, const bf16 *x, const bf16 *w, const float *rstd,
                       bf16 *grad_x, float *grad_w, int64_t rows, int64_t dim) {
#pragma omp parallel for schedule(static) if (rows * dim > 65536)
    for (int64_t r = 0; r < rows; r++) {
        const bf16 *gr = gy + r * dim, *xr = x + r * dim;
        bf16 *out = grad_x + r * dim;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < dim; j++)
            dot += bf2f(f2bf(bf2f(gr[j]) * bf2f(w[j]))) * bf2f(xr[j]);
        const float rs = rstd[r], c = rs * rs * rs * dot / (float)dim;
#pragma omp simd
        for (int64_t j = 0; j < dim; j++)
            out[j] = f2bf(rs * bf2f(f2bf(bf2f(gr[j]) * bf2f(w[j]))) - bf2f(xr[j]) * c);
    }
    /* grad_w: each thread owns a block of columns and runs down the rows */
#pragma omp parallel for schedule(static) if (rows * dim > 65536)
    for (int64_t j0 = 0; j0 < dim; j0 += 64) {
        const int64_t width = dim - j0 < 64 ? dim - j0 : 64;
        float acc[64] = {0.0f};
        for (int64_t r = 0; r < rows; r++) {
            const bf16 *gr = gy + r * dim + j0, *xr = x + r * dim + j0;
            const float rs = rstd[r];
#pragma omp simd
            for (int64_t j = 0; j < width; j++) acc[j] += bf2f(gr[j]) * bf2f(f2bf(bf2f(xr[j]) * rs));
        }
        for (int64_t j = 0; j < width; j++) grad_w[j0 + j] = acc[j];
    }
}

/* Rotary embedding of x (batch, heads, steps, dim) bf16 as transformers'
 * apply_rotary_pos_emb computes it in bf16: out = bf16(bf16(x cos) + bf16(rot(x) sin)),
 * rot(x) = (-x2, x1) for the two halves x1, x2 of each row; cos and sin (batch, steps,
 * dim). With backward set, x is the gradient of out and out gets the gradient of x, as
 * autograd sums it: bf16(bf16(g cos) + rot^T(bf16(g sin))), rot^T(y) = (y2, -y1).
 * x has element strides (xb, xh, xt) and out (ob, oh, ot), cos and sin (cb, ct); the last
 * dimension of each is contiguous. */
void rope_train(const bf16 *x, bf16 *out, const bf16 *cos, const bf16 *sin, int64_t batch,
                int64_t heads, int64_t steps, int64_t dim, int64_t xb, int64_t xh, int64_t xt,
                int64_t ob, int64_t oh, int64_t ot, int64_t cb, int64_t ct, int backward) {
    const int64_t half = dim / 2, rows = batch * steps * heads;
#pragma omp parallel for schedule(static) if (rows * dim > 65536)
    for (int64_t row = 0; row < rows; row++) {
        /* rows in (batch, step, head) order: for q and k as the projections lay them out
         * (steps outside heads), consecutive rows are adjacent in memory */
        const int64_t b = row / (steps * heads), t = row / heads % steps, h = row % heads;
        const bf16 *xr = x + b * xb + h * xh + t * xt;
        const bf16 *c = cos + b * cb + t * ct, *s = sin + b * cb + t * ct;
        bf16 *o = out + b * ob + h * oh + t * ot;
        /* rope1 with a half's sign flipped (bf16 negation is exact, so is a product's) */
        if (backward) {
#pragma omp simd
            for (int64_t j = 0; j < half; j++) {
                o[j] = rope1(xr[j], c[j], xr[j + half], s[j + half]);
                o[j + half] = rope1(xr[j + half], c[j + half], (bf16)(xr[j] ^ 0x8000), s[j]);
            }
        } else {
#pragma omp simd
            for (int64_t j = 0; j < half; j++) {
                o[j] = rope1(xr[j], c[j], (bf16)(xr[j + half] ^ 0x8000), s[j]);
                o[j + half] = rope1(xr[j + half], c[j + half], xr[j], s[j + half]);
            }
        }
    }
}

/* The sum of the squares of n values, bf16 (x16) or float32 (x32 when x16 is NULL):
 * float32 sums over blocks of SQUARES_BLOCK values, added up in double. */
#define SQUARES_BLOCK 4096
double sum_squares(const bf16 *x16, const float *x32, int64_t n) {
    double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (n > 65536)
    for (int64_t start = 0; start < n; start += SQUARES_BLOCK) {
        const int64_t end = n - start < SQUARES_BLOCK ? n : start + SQUARES_BLOCK;
        float block = 0.0f;
        if (x16 != NULL) {
#pragma omp simd reduction(+ : block)
            for (int64_t i = start; i < end; i++) block += bf2f(x16[i]) * bf2f(x16[i]);
        } else {
#pragma omp simd reduction(+ : block)
            for (int64_t i = start; i < end; i++) block += x32[i] * x32[i];
        }
        total += block;
    }
    return total;
}

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define ATTN_FAST_DIM 64
#define ATTN_FAST_GROUP 4

static inline __m512 bf16x16(const bf16 *p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

/* f2bf of 16 floats: round to nearest even, NaN stays (quiet) NaN. */
static inline __m256i bf16_of_f32x16(__m512 f) {
    const __m512i u = _mm512_castps_si512(f), high = _mm512_srli_epi32(u, 16);
    const __m512i bias = _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)),
                                          _mm512_set1_epi32(0x7fff));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(rounded);
}

/* out lane i = the sum of the 16 lanes of v[i] */
static inline __m512 lane_sums16(const __m512 v[16]) {
    __m512 pairs[8], quads[4], octs[2];
    for (int i = 0; i < 8; i++) /* per 128-bit lane: [v2i 0+2, v2i+1 0+2, v2i 1+3, v2i+1 1+3] */
        pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                                 _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) { /* per 128-bit lane: one partial sum of each of 4 vectors */
        const __m512d a = _mm512_castps_pd(pairs[2 * i]), b = _mm512_castps_pd(pairs[2 * i + 1]);
        quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int i = 0; i < 2; i++) /* 128-bit lanes: 4 vectors twice, the next 4 twice */
        octs[i] = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], 0x88),
                                _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(octs[0], octs[1], 0x88),
                         _mm512_shuffle_f32x4(octs[0], octs[1], 0xdd));
}

/* The two passes of decode_attention over one (row, kv head) with dim 64. Scores: bf16
 * pair dot products (exact products, float32 sums) of 16 keys at a time, whose lane sums
 * come out as one vector. Values: the group's output sums stay in registers while the
 * values stream by; the bf16 x bf16 products are exact in float32, so the fused
 * multiply-adds round as separate multiplies and adds would. ``stride``: the distance
 * between two query heads' scores. */
static inline void attn_scores64(const bf16 *q, const bf16 *k, const bf16 *m, float *scores,
                                 int64_t steps, int64_t stride, float scale, const int group) {
    __m512bh qv[ATTN_FAST_GROUP][2];
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 2; c++)
            qv[g][c] = (__m512bh)_mm512_loadu_si512((const void *)(q + g * 64 + c * 32));
    const __m512 scales = _mm512_set1_ps(scale);
    int64_t t = 0;
    for (; t + 16 <= steps; t += 16) {
        const __m512 bias = m ? bf16x16(m + t) : _mm512_setzero_ps();
        for (int g = 0; g < group; g++) {
            __m512 dots[16];
            for (int i = 0; i < 16; i++) {
                const bf16 *kt = k + (t + i) * 64;
                const __m512 low = _mm512_dpbf16_ps(
                    _mm512_setzero_ps(), qv[g][0], (__m512bh)_mm512_loadu_si512((const void *)kt));
                dots[i] = _mm512_dpbf16_ps(low, qv[g][1],
                                           (__m512bh)_mm512_loadu_si512((const void *)(kt + 32)));
            }
            _mm512_storeu_ps(scores + g * stride + t,
                             _mm512_add_ps(_mm512_mul_ps(lane_sums16(dots), scales), bias));
        }
    }
    if (t < steps) { /* the last columns summed as a block sums them: a column's score
                        does not depend on where its segment's blocks begin */
        const int64_t rest = steps - t;
        float bias[16], sums[16];
        for (int64_t i = 0; i < rest; i++) bias[i] = m ? bf2f(m[t + i]) : 0.0f;
        for (int g = 0; g < group; g++) {
            __m512 dots[16];
            for (int i = 0; i < 16; i++) {
                dots[i] = _mm512_setzero_ps();
                if (i >= rest) continue;
                const bf16 *kt = k + (t + i) * 64;
                const __m512 low = _mm512_dpbf16_ps(
                    dots[i], qv[g][0], (__m512bh)_mm512_loadu_si512((const void *)kt));
                dots[i] = _mm512_dpbf16_ps(low, qv[g][1],
                                           (__m512bh)_mm512_loadu_si512((const void *)(kt + 32)));
            }
            _mm512_storeu_ps(sums, lane_sums16(dots));
            for (int64_t i = 0; i < rest; i++) scores[g * stride + t + i] = sums[i] * scale + bias[i];
        }
    }
}

static inline void attn_values64(const float *p, const bf16 *v0, int64_t n0, const bf16 *v1,
                                 int64_t n1, const float *inv, bf16 *o, int64_t stride,
                                 const int group) {
    __m512 acc[ATTN_FAST_GROUP][4];
    for (int g = 0; g < group; g++)
        for (int c = 0; c < 4; c++) acc[g][c] = _mm512_setzero_ps();
    for (int64_t t = 0; t < n0 + n1; t++) { /* the two segments' columns in order */
        const bf16 *vt = t < n0 ? v0 + t * 64 : v1 + (t - n0) * 64;
        const __m512 a = bf16x16(vt), b = bf16x16(vt + 16), c = bf16x16(vt + 32),
                     d = bf16x16(vt + 48);
        for (int g = 0; g < group; g++) {
            const __m512 w = _mm512_set1_ps(p[g * stride + t]);
            acc[g][0] = _mm512_fmadd_ps(w, a, acc[g][0]);
            acc[g][1] = _mm512_fmadd_ps(w, b, acc[g][1]);
            acc[g][2] = _mm512_fmadd_ps(w, c, acc[g][2]);
            acc[g][3] = _mm512_fmadd_ps(w, d, acc[g][3]);
        }
    }
    for (int g = 0; g < group; g++) {
        const __m512 scale = _mm512_set1_ps(inv[g]);
        for (int c = 0; c < 4; c++)
            _mm256_storeu_si256((__m256i *)(o + g * 64 + c * 16),
                                bf16_of_f32x16(_mm512_mul_ps(acc[g][c], scale)));
    }
}
#endif

/* Softmax of each query head's scores (stride apart, columns used, the rest padding set
 * to -inf here): exp(s - max) in float32, rounded to bf16 in place; inv[g] = 1 / the
 * float32 sum. */
static void attn_softmax(float *scores, float *inv, int64_t group, int64_t columns,
                         int64_t stride) {
    for (int64_t g = 0; g < group; g++) {
        float *s = scores + g * stride, top = -INFINITY, sum = 0.0f;
        for (int64_t t = columns; t < stride; t++) s[t] = -INFINITY;
#pragma omp simd reduction(max : top)
        for (int64_t t = 0; t < stride; t++) top = s[t] > top ? s[t] : top;
#pragma omp simd reduction(+ : sum)
        for (int64_t t = 0; t < stride; t++) {
            const float e = s[t] == -INFINITY ? 0.0f : exp_approx(s[t] - top);
            sum += e;
            s[t] = bf2f(f2bf(e));
        }
        inv[g] = 1.0f / sum;
    }
}

#if defined(__AVX512F__) && defined(__AVX512BF16__)
/* One (row, kv head) of decode_attention with dim 64: the segment of n0 shared columns
 * (k0, v0, mask m0) then the row's own n1 (k1, v1, mask m1). ``group`` is a constant at
 * each call, so the register blocks unroll. */
static inline void attn_task64(const bf16 *q, const bf16 *k0, const bf16 *v0, const bf16 *m0,
                               int64_t n0, const bf16 *k1, const bf16 *v1, const bf16 *m1,
                               int64_t n1, float *scores, float *inv, bf16 *o, int64_t stride,
                               float scale, const int group) {
    attn_scores64(q, k0, m0, scores, n0, stride, scale, group);
    attn_scores64(q, k1, m1, scores + n0, n1, stride, scale, group);
    attn_softmax(scores, inv, group, n0 + n1, stride);
    attn_values64(scores, v0, n0, v1, n1, inv, o, stride, group);
}
#endif

/* The scores scale * q.k + mask of one (row, kv head) over n columns, plain loops. */
static void attn_scores_plain(const float *qf, const bf16 *k, const bf16 *m, float *scores,
                              int64_t n, int64_t stride, int64_t group, int64_t dim,
                              float scale) {
    for (int64_t t = 0; t < n; t++) {
        const bf16 *kt = k + t * dim;
        const float bias = m ? bf2f(m[t]) : 0.0f;
        for (int64_t g = 0; g < group; g++) {
            const float *qg = qf + g * dim;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int64_t j = 0; j < dim; j++) dot += qg[j] * bf2f(kt[j]);
            scores[g * stride + t] = dot * scale + bias;
        }
    }
}

/* Attention of one new token per row over its cached keys and values (a decode step).
 *
 * q: (rows, heads, dim); out: (rows, heads * dim). keys, values: one layer's cache at
 * (row 0, kv head 0, column 0); row r, kv head h, column t at r * row_stride +
 * h * head_stride + t * dim; columns 0 .. steps-1 are attended. With prefix_len > 0 each
 * row first attends to the prefix_len columns of its prompt prefix_of[r] in
 * prefix_keys / prefix_values (strides prefix_row_stride, prefix_head_stride): the
 * prompt's keys and values kept once for all the rows that sample from it. mask is NULL
 * or additive bf16 (-inf at padding) over the first segment: the prefix, row
 * prefix_of[r] of (prompts, mask_stride), when there is one, else row r of (rows,
 * mask_stride) over the row's own columns; the last column is never masked. Query head
 * j reads kv head j / (heads / kv_heads), so each kv head's keys and values are read
 * once for its group of query heads. As PyTorch's CPU flash attention does for bf16:
 * scores scale * q.k + mask and their softmax in float32, the unnormalised
 * probabilities rounded to bf16 where they weight the values, the float32 sum divided
 * out at the end. Head size 64 with up to 4 query heads per kv head has a
 * register-blocked AVX-512 path; other shapes take plain loops. */
void decode_attention(const bf16 *q, const bf16 *keys, const bf16 *values, const bf16 *mask,
                      bf16 *out, int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim,
                      int64_t steps, int64_t row_stride, int64_t head_stride,
                      int64_t mask_stride, float scale, const bf16 *prefix_keys,
                      const bf16 *prefix_values, const int64_t *prefix_of, int64_t prefix_len,
                      int64_t prefix_row_stride, int64_t prefix_head_stride) {
    const int64_t group = heads / kv_heads, columns = prefix_len + steps;
    /* each query head's scores padded with -inf to a multiple of 32 columns, so the
     * softmax loop runs whole vectors */
    const int64_t stride = (columns + 31) & ~(int64_t)31;
#if defined(__AVX512F__) && defined(__AVX512BF16__)
    const int fast = dim == ATTN_FAST_DIM && group <= ATTN_FAST_GROUP;
#endif
#pragma omp parallel if (rows * heads * columns * dim > 32768)
    {
        float *scores = malloc(sizeof(float) * (size_t)(group * stride));
        float *acc = malloc(sizeof(float) * (size_t)(group * dim));
        float *qf = malloc(sizeof(float) * (size_t)(group * dim));
        float *inv = malloc(sizeof(float) * (size_t)group);
#pragma omp for schedule(static)
        for (int64_t task = 0; task < rows * kv_heads; task++) {
            const int64_t r = task / kv_heads, h = task % kv_heads;
            const int64_t p = prefix_len > 0 ? prefix_of[r] : 0;
            const int64_t at = p * prefix_row_stride + h * prefix_head_stride;
            const bf16 *k0 = prefix_len > 0 ? prefix_keys + at : NULL;
            const bf16 *v0 = prefix_len > 0 ? prefix_values + at : NULL;
            const bf16 *k1 = keys + r * row_stride + h * head_stride;
            const bf16 *v1 = values + r * row_stride + h * head_stride;
            const bf16 *m0 = mask && prefix_len > 0 ? mask + p * mask_stride : NULL;
            const bf16 *m1 = mask && prefix_len == 0 ? mask + r * mask_stride : NULL;
            const bf16 *qr = q + (r * heads + h * group) * dim;
            bf16 *o = out + (r * heads + h * group) * dim;
            if (task + 1 < rows * kv_heads) { /* the next task's own columns (this thread's
                                                 next under the static schedule) */
                const int64_t nr = (task + 1) / kv_heads, nh = (task + 1) % kv_heads;
                const char *nk = (const char *)(keys + nr * row_stride + nh * head_stride);
                const char *nv = (const char *)(values + nr * row_stride + nh * head_stride);
                const int64_t bytes = steps * dim * (int64_t)sizeof(bf16);
                for (int64_t line = 0; line < bytes && line < 16384; line += 64) {
                    __builtin_prefetch(nk + line);
                    __builtin_prefetch(nv + line);
                }
            }
#if defined(__AVX512F__) && defined(__AVX512BF16__)
            if (fast) {
#define ATTN_TASK(G)                                                                       \
    attn_task64(qr, k0, v0, m0, prefix_len, k1, v1, m1, steps, scores, inv, o, stride, scale, G)
                switch (group) {
                case 1: ATTN_TASK(1); break;
                case 2: ATTN_TASK(2); break;
                case 3: ATTN_TASK(3); break;
                default: ATTN_TASK(4); break;
                }
#undef ATTN_TASK
                continue;
            }
#endif
            for (int64_t j = 0; j < group * dim; j++) qf[j] = bf2f(qr[j]);
            attn_scores_plain(qf, k0, m0, scores, prefix_len, stride, group, dim, scale);
            attn_scores_plain(qf, k1, m1, scores + prefix_len, steps, stride, group, dim, scale);
            attn_softmax(scores, inv, group, columns, stride);
            memset(acc, 0, sizeof(float) * (size_t)(group * dim));
            for (int64_t t = 0; t < columns; t++) {
                const bf16 *vt = t < prefix_len ? v0 + t * dim : v1 + (t - prefix_len) * dim;
                for (int64_t g = 0; g < group; g++) {
                    const float w = scores[g * stride + t];
                    float *ag = acc + g * dim;
#pragma omp simd
                    for (int64_t j = 0; j < dim; j++) ag[j] += w * bf2f(vt[j]);
                }
            }
            for (int64_t g = 0; g < group; g++)
#pragma omp simd
                for (int64_t j = 0; j < dim; j++) o[g * dim + j] = f2bf(acc[g * dim + j] * inv[g]);
        }
        free(scores);
        free(acc);
        free(qf);
        free(inv);
    }
}

#define SAMPLE_BLOCK 256

/* The unnormalised weight of a logit already divided by the temperature: the sums and
 * the draw of sample_rows must compute it alike. */
static inline float sample_weight(float v, float top) {
    return v == -INFINITY ? 0.0f : exp_approx(v - top);
}

/* One token per row from softmax(logits / T) over the whole vocabulary, as
 * trinity.rollout.sampling.sample_tokens draws it without top-k, top-p or banned tokens:
 * the first token whose cumulative weight exceeds u * total (tokens of zero weight are
 * never drawn), or the first largest logit where T <= 0 (greedy, scored with T = 1).
 * logprobs: log_softmax(logits / T) at the token. Two passes over each row: the max,
 * then the weights' sums per block of 256 tokens; the draw then reads one block again.
 * The sums run in another order than PyTorch's, so a draw within float rounding of a
 * token boundary can land on the neighbouring token. */
void sample_rows(const float *logits, const float *temperature, const float *u, int64_t rows,
                 int64_t vocab, int64_t *tokens, float *logprobs) {
    const int64_t blocks = (vocab + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK;
#pragma omp parallel if (rows * vocab > 65536)
    {
        float *sums = malloc(sizeof(float) * (size_t)blocks);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const float *x = logits + r * vocab;
            const float t = temperature[r];
            const int greedy = t <= 0.0f;
            const float scale = greedy ? 1.0f : t; /* x / 1 is x: no special case needed */
            float top = -INFINITY;
#pragma omp simd reduction(max : top)
            for (int64_t j = 0; j < vocab; j++) {
                const float v = x[j] / scale;
                top = v > top ? v : top;
            }
            float total = 0.0f;
            for (int64_t b = 0; b < blocks; b++) {
                const int64_t end = (b + 1) * SAMPLE_BLOCK < vocab ? (b + 1) * SAMPLE_BLOCK : vocab;
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int64_t j = b * SAMPLE_BLOCK; j < end; j++)
                    sum += sample_weight(x[j] / scale, top);
                sums[b] = sum;
                total += sum;
            }
            int64_t token = 0;
            if (greedy || !(total > 0.0f)) { /* (no finite logit: token 0, as argmax) */
                while (token + 1 < vocab && x[token] != top) token++;
            } else {
                float target = u[r] * total, before = 0.0f;
                int64_t b = 0;
                while (b + 1 < blocks && !(before + sums[b] > target && sums[b] > 0.0f))
                    before += sums[b++];
                if (!(sums[b] > 0.0f)) { /* rounding put the target past the mass: its end */
                    while (!(sums[b] > 0.0f)) b--;
                    target = INFINITY;
                }
                const int64_t end = (b + 1) * SAMPLE_BLOCK < vocab ? (b + 1) * SAMPLE_BLOCK : vocab;
                for (int64_t j = b * SAMPLE_BLOCK; j < end; j++) {
                    const float w = sample_weight(x[j] / scale, top);
                    if (!(w > 0.0f)) continue;
                    token = j; /* the block's last token of weight when the target is past it */
                    before += w;
                    if (before > target) break;
                }
            }
            tokens[r] = token;
            logprobs[r] = x[token] / scale - (top + logf(total));
        }
        free(sums);
    }
}

/* Sizes of one decode step for decode_layers (mirrored by a ctypes.Structure in
 * trinity/kernels/__init__.py). */
typedef struct {
    int64_t layers, rows, hidden, heads, kv_heads, dim, inter;
    int64_t column, layer_stride, row_stride, head_stride, mask_stride;
    int64_t prefix_len, prefix_layer_stride, prefix_row_stride, prefix_head_stride;
    float eps, scale;
} decode_shape;

/* The layout of decode_shape as this compiler lays it out, for the ctypes mirror to be
 * checked against when the library loads: out[0] = sizeof, out[1] = the number of fields,
 * then each field's offset in declaration order. Returns the number of values written
 * (at most capacity). */
#define DECODE_SHAPE_FIELD(name) offsetof(decode_shape, name)
int64_t decode_shape_layout(int64_t *out, int64_t capacity) {
    const int64_t layout[] = {
        sizeof(decode_shape), 18,
        DECODE_SHAPE_FIELD(layers), DECODE_SHAPE_FIELD(rows), DECODE_SHAPE_FIELD(hidden),
        DECODE_SHAPE_FIELD(heads), DECODE_SHAPE_FIELD(kv_heads), DECODE_SHAPE_FIELD(dim),
        DECODE_SHAPE_FIELD(inter), DECODE_SHAPE_FIELD(column), DECODE_SHAPE_FIELD(layer_stride),
        DECODE_SHAPE_FIELD(row_stride), DECODE_SHAPE_FIELD(head_stride),
        DECODE_SHAPE_FIELD(mask_stride), DECODE_SHAPE_FIELD(prefix_len),
        DECODE_SHAPE_FIELD(prefix_layer_stride), DECODE_SHAPE_FIELD(prefix_row_stride),
        DECODE_SHAPE_FIELD(prefix_head_stride), DECODE_SHAPE_FIELD(eps), DECODE_SHAPE_FIELD(scale),
    };
    const int64_t n = (int64_t)(sizeof layout / sizeof layout[0]);
    for (int64_t i = 0; i < n && i < capacity; i++) out[i] = layout[i];
    return n < capacity ? n : capacity;
}
#undef DECODE_SHAPE_FIELD

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_PREFETCH 3 /* weight tiles fetched ahead of the one being multiplied */

typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

int amx_available(void) {
    /* ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA: Linux 5.16+ */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

/* tiles 0, 1: rows 0-15 / 16-31 of x; 2, 3: two weight blocks; 4-7: the four sums */
static void amx_configure(int64_t rows) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    const uint8_t low = rows < 16 ? rows : 16, high = rows > 16 ? rows - 16 : 1;
    const uint8_t tile_rows[8] = {low, high, 16, 16, low, low, high, high};
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = tile_rows[t];
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

static inline void amx_prefetch(const bf16 *tile) {
    for (int line = 0; line < 1024; line += 64) _mm_prefetch((const char *)tile + line, _MM_HINT_T0);
}

void amx_linear(const bf16 *x, const bf16 *packed, void *out, int64_t M, int64_t N,
                int64_t K, int out_f32) {
    const int64_t slices = K / 32, blocks = N / 16;
#pragma omp parallel if (M * N * K > 65536)
    {
        float sums[32][32];
        int64_t configured = -1;
#pragma omp for schedule(static)
        for (int64_t pair = 0; pair < (blocks + 1) / 2; pair++) {
            const int64_t n0 = 32 * pair, width = N - n0 < 32 ? N - n0 : 32;
            const bf16 *b0 = packed + 2 * pair * slices * 512;
            /* an odd last block multiplies its own tiles twice; only its half is kept */
            const bf16 *b1 = width > 16 ? b0 + slices * 512 : b0;
            for (int64_t m0 = 0; m0 < M; m0 += 32) {
                const int64_t rows = M - m0 < 32 ? M - m0 : 32;
                if (rows != configured) {
                    amx_configure(rows);
                    configured = rows;
                }
                const bf16 *xa = x + m0 * K;
                _tile_zero(4);
                _tile_zero(5);
                _tile_zero(6);
                _tile_zero(7);
                for (int64_t s = 0; s < slices; s++) {
                    const int64_t ahead = s + AMX_PREFETCH - slices;
                    if (m0 == 0 && ahead < 0) {
                        amx_prefetch(b0 + (s + AMX_PREFETCH) * 512);
                        amx_prefetch(b1 + (s + AMX_PREFETCH) * 512);
                    } else if (m0 == 0 && pair + 1 < (blocks + 1) / 2 && ahead < slices) {
                        /* the first tiles of the next pair, this thread's next under the
                         * static schedule: no stall at the start of each pair */
                        const bf16 *next = packed + 2 * (pair + 1) * slices * 512;
                        amx_prefetch(next + ahead * 512);
                        if (N - 32 * (pair + 1) > 16) amx_prefetch(next + (slices + ahead) * 512);
                    }
                    _tile_loadd(2, b0 + s * 512, 64);
                    _tile_loadd(3, b1 + s * 512, 64);
                    _tile_loadd(0, xa + s * 32, K * 2);
                    _tile_dpbf16ps(4, 0, 2);
                    _tile_dpbf16ps(5, 0, 3);
                    if (rows > 16) {
                        _tile_loadd(1, xa + 16 * K + s * 32, K * 2);
                        _tile_dpbf16ps(6, 1, 2);
                        _tile_dpbf16ps(7, 1, 3);
                    }
                }
                _tile_stored(4, &sums[0][0], 128);
                _tile_stored(5, &sums[0][16], 128);
                if (rows > 16) {
                    _tile_stored(6, &sums[16][0], 128);
                    _tile_stored(7, &sums[16][16], 128);
                }
                for (int64_t m = 0; m < rows; m++) {
                    if (out_f32) {
                        float *o = (float *)out + (m0 + m) * N + n0;
#pragma omp simd
                        for (int64_t j = 0; j < width; j++) o[j] = bf2f(f2bf(sums[m][j]));
                    } else {
                        bf16 *o = (bf16 *)out + (m0 + m) * N + n0;
#pragma omp simd
                        for (int64_t j = 0; j < width; j++) o[j] = f2bf(sums[m][j]);
                    }
                }
            }
        }
        if (configured >= 0) _tile_release();
    }
}

/* The layers of one decode step of a Llama-family model, one token per row, with every
 * matmul on AMX: the loop of LlamaDecoder.fused_step (trinity/rollout/fast_decode.py)
 * without a return to Python between its 9 kernels per layer.
 *
 * On entry h holds the first layer's input norm of x, the residual stream (rows,
 * hidden); on return x is the last layer's output and h its final norm. packed: 4
 * weights per layer (q|k|v, o, gate|up, down) as amx_pack lays them out. norms: per
 * layer the input and post-attention norm weights, then the final norm. keys / values:
 * the caches at (layer 0, row 0, kv head 0, column 0), a layer every layer_stride
 * elements; rows, kv heads and columns as rope_kv and decode_attention read them, and
 * with prefix_len > 0 the prompts' shared prefix_keys / prefix_values (a layer every
 * prefix_layer_stride elements, row prefix_of[r] for row r) attended first. The
 * scratch buffers hold one step's rows: qkv (rows, (heads + 2 kv_heads) dim), q and attn
 * (rows, heads dim), delta (rows, hidden), gate_up (rows, 2 inter), act (rows, inter). */
void decode_layers(const decode_shape *shape, const bf16 *const *packed, const bf16 *const *norms,
                   bf16 *x, bf16 *h, const int64_t *positions, const bf16 *cos, const bf16 *sin,
                   bf16 *keys, bf16 *values, const bf16 *mask, const bf16 *prefix_keys,
                   const bf16 *prefix_values, const int64_t *prefix_of, bf16 *qkv, bf16 *q,
                   bf16 *attn, bf16 *delta, bf16 *gate_up, bf16 *act) {
    const decode_shape d = *shape;
    const int64_t width = d.heads * d.dim, qkv_width = (d.heads + 2 * d.kv_heads) * d.dim;
    for (int64_t l = 0; l < d.layers; l++) {
        const bf16 *const *w = packed + 4 * l;
        bf16 *k = keys + l * d.layer_stride, *v = values + l * d.layer_stride;
        amx_linear(h, w[0], qkv, d.rows, qkv_width, d.hidden, 0);
        rope_kv(qkv, positions, cos, sin, q, k + d.column * d.dim, v + d.column * d.dim, d.rows,
                d.heads, d.kv_heads, d.dim, d.row_stride, d.head_stride);
        const int64_t prefix = l * d.prefix_layer_stride;
        decode_attention(q, k, v, mask, attn, d.rows, d.heads, d.kv_heads, d.dim, d.column + 1,
                         d.row_stride, d.head_stride, d.mask_stride, d.scale,
                         d.prefix_len > 0 ? prefix_keys + prefix : NULL,
                         d.prefix_len > 0 ? prefix_values + prefix : NULL, prefix_of,
                         d.prefix_len, d.prefix_row_stride, d.prefix_head_stride);
        amx_linear(attn, w[1], delta, d.rows, d.hidden, width, 0);
        add_rms_norm(x, delta, norms[2 * l + 1], h, d.rows, d.hidden, d.eps);
        amx_linear(h, w[2], gate_up, d.rows, 2 * d.inter, d.hidden, 0);
        silu_mul(gate_up, act, d.rows, d.inter);
        amx_linear(act, w[3], delta, d.rows, d.hidden, d.inter, 0);
        add_rms_norm(x, delta, norms[2 * l + 2], h, d.rows, d.hidden, d.eps);
    }
}
#else
int amx_available(void) { return 0; }

void decode_layers(const decode_shape *shape, const bf16 *const *packed, const bf16 *const *norms,
                   bf16 *x, bf16 *h, const int64_t *positions, const bf16 *cos, const bf16 *sin,
                   bf16 *keys, bf16 *values, const bf16 *mask, const bf16 *prefix_keys,
                   const bf16 *prefix_values, const int64_t *prefix_of, bf16 *qkv, bf16 *q,
                   bf16 *attn, bf16 *delta, bf16 *gate_up, bf16 *act) {
    (void)shape, (void)packed, (void)norms, (void)x, (void)h, (void)positions, (void)cos;
    (void)sin, (void)keys, (void)values, (void)mask, (void)prefix_keys, (void)prefix_values;
    (void)prefix_of, (void)qkv, (void)q, (void)attn, (void)delta, (void)gate_up, (void)act;
}

void amx_linear(const bf16 *x, const bf16 *packed, void *out, int64_t M, int64_t N,
                int64_t K, int out_f32) {
    (void)x, (void)packed, (void)out, (void)M, (void)N, (void)K, (void)out_f32;
}
#endif
