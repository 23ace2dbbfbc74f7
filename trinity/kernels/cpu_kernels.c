/* Fused CPU kernels for bf16 decoding and the bf16-weights optimizer step.
 *
 * Built at first use by trinity/kernels/__init__.py (gcc -O3 -march=native -fopenmp) and
 * called through ctypes. OpenMP here is the libgomp that torch already loaded (same
 * soname), so these loops share torch's thread team instead of starting a second one.
 *
 * bf16 values are uint16_t bit patterns: widening is a shift, narrowing rounds to nearest
 * even (NaN stays NaN), as torch's conversions do.
 */
#include <math.h>
#include <stdint.h>
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
