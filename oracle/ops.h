// The oracle's operations, one function per op, in double precision with
// plain loops. Each is the specification of one step of the model; the
// oracle's forward pass is nothing but these composed. Weights arrive as the
// model's float storage and are widened to double exactly on read.
//
// Shapes are written [outer][inner], row-major. E is d_model, H query heads,
// KVH KV heads, D head_dim, T tokens, F d_ff.
//
// The ops that make a vector come twice: returning a new vector, and writing
// into a caller's buffer `out` of the result's size (the forward pass uses
// these to keep heap allocation out of its loops). Both are the same loops
// and give the same bits; `out` must not overlap the inputs.
#pragma once

#include <span>
#include <vector>

namespace kvcheck::oracle {

// LayerNorm over one vector: (x - mean) / sqrt(biased_var + eps) * gain + bias.
// x [E], gain [E], bias [E] -> [E]
std::vector<double> layer_norm(std::span<const double> x, std::span<const float> gain,
                               std::span<const float> bias, double eps);
void layer_norm(std::span<const double> x, std::span<const float> gain, std::span<const float> bias,
                double eps, std::span<double> out);

// RMSNorm over one vector: x / sqrt(mean(x^2) + eps) * gain.
// x [E], gain [E] -> [E]
std::vector<double> rms_norm(std::span<const double> x, std::span<const float> gain, double eps);
void rms_norm(std::span<const double> x, std::span<const float> gain, double eps,
              std::span<double> out);

// y = W x (+ b), with W in the nn.Linear layout [out][in]. An empty bias
// means the layer has none.
// x [in], weight [out][in], bias [out] or [] -> [out]
std::vector<double> linear(std::span<const double> x, std::span<const float> weight,
                           std::span<const float> bias, int out_features);
void linear(std::span<const double> x, std::span<const float> weight, std::span<const float> bias,
            int out_features, std::span<double> out);

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): GPT-2's approximation,
// not the erf form.
double gelu_tanh(double x);

// x * sigmoid(x)
double silu(double x);

// Rotary embedding at absolute `position`, rotate-half pairing (Hugging Face
// Llama): element i pairs with i + D/2, angle position * theta^(-2i/D).
// head [D], D even; rotated in place. It is rope_cos_sin then rotate_half.
void apply_rope(std::span<double> head, int position, double theta);

// cos and sin of RoPE's angles at `position` (a shift's re-rotation passes its
// delta): angle_i = position * theta^(-2i/D) for i < D/2, D = 2 * cos.size().
// cos [D/2], sin [D/2] written. Apart so a caller rotating many heads at one
// position (the tolerance's value track) computes them once, with the same bits.
void rope_cos_sin(int position, double theta, std::span<double> cos, std::span<double> sin);

// The rotate-half rotation by given angles: head[i] = x_i cos_i - x_{i+D/2}
// sin_i, head[i+D/2] = x_{i+D/2} cos_i + x_i sin_i.
// head [D], cos [D/2], sin [D/2]; rotated in place.
void rotate_half(std::span<double> head, std::span<const double> cos, std::span<const double> sin);

// The KV head a query head reads: contiguous groups of n_heads / n_kv_heads
// query heads share one KV head (repeat_interleave), never h % n_kv_heads.
int kv_head_of(int query_head, int n_heads, int n_kv_heads);

// exp(s_i - max s) / sum_j exp(s_j - max s). scores [N], N >= 1 -> [N]
std::vector<double> softmax(std::span<const double> scores);
void softmax(std::span<const double> scores, std::span<double> out);

// The scores of one query head over N keys: q.k_j / sqrt(D), computed as
// q.k_j * (1 / sqrt(D)), the dot product summed over d in order.
// query [D], keys [N][KVH][D] (read at KV head kv_head) -> scores [N]
void attention_scores(std::span<const double> query, std::span<const double> keys, int n_kv_heads,
                      int kv_head, std::span<double> scores);

// sum_j weights_j values[j][kv_head], summed over j in order from 0.0.
// weights [N], values [N][KVH][D] -> out [D]
void weighted_sum(std::span<const double> weights, std::span<const double> values, int n_kv_heads,
                  int kv_head, std::span<double> out);

// One query position over exactly the N keys given (the caller's choice of
// keys is the mask): per query head, attention_scores, softmax, weighted_sum.
// query [H][D], keys [N][KVH][D], values [N][KVH][D] -> out [H][D]
void attend(std::span<const double> query, std::span<const double> keys,
            std::span<const double> values, int n_heads, int n_kv_heads, int head_dim,
            std::span<double> out);

// Causal self-attention of T positions over themselves: the query at t
// attends to keys 0..t with scores q.k / sqrt(D); with window W > 0 only to
// keys j with t - W < j <= t (a sliding-window layer; 0: no window). Each
// position is one attend() over its keys.
// q [T][H][D], k [T][KVH][D], v [T][KVH][D] -> [T][H][D]
std::vector<double> causal_attention(std::span<const double> q, std::span<const double> k,
                                     std::span<const double> v, int n_tokens, int n_heads,
                                     int n_kv_heads, int head_dim, int window = 0);
void causal_attention(std::span<const double> q, std::span<const double> k,
                      std::span<const double> v, int n_tokens, int n_heads, int n_kv_heads,
                      int head_dim, std::span<double> out, int window = 0);

}  // namespace kvcheck::oracle
