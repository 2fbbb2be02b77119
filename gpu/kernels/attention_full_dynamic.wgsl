// attention_full_dynamic: self-attention over one unmasked sequence of T rows given at run time (params),
// softmax(q k^T / sqrt(D)) v per head, from fused projections qkv [T, 3 * HEADS * D] (q | k | v) to
// out [T, HEADS * D].
// Work split: one workgroup per (query row, head), grid (T, HEADS); 64 invocations = D: scores for keys
// lid, lid + 64, ... into workgroup memory, max and sum reductions, then each invocation one output dim.
const D: u32 = 64u;
const MAX_T: u32 = 512u;

// params: 0 T, 1 heads; 63 is 0
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

var<workgroup> scores: array<f32, MAX_T>;
var<workgroup> red: array<f32, D>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.x;
    let h = wid.y;
    let n = p[0];
    let width = p[1] * D;
    let row = 3u * width;
    let scale = 1.0 / sqrt(f32(D));
    var m = -3.4e38;
    for (var j = lid; j < n; j += D) {
        var s = 0.0;
        for (var e = 0u; e < D; e++) {
            s += qkv[t * row + h * D + e] * qkv[j * row + width + h * D + e];
        }
        s *= scale;
        scores[j] = s;
        m = max(m, s);
    }
    red[lid] = m;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
        workgroupBarrier();
    }
    let mx = red[0];
    workgroupBarrier();
    var z = 0.0;
    for (var j = lid; j < n; j += D) {
        let e = exp(scores[j] - mx);
        scores[j] = e;
        z += e;
    }
    red[lid] = z;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (lid < s) { red[lid] += red[lid + s]; }
        workgroupBarrier();
    }
    let total = red[0];
    var acc = 0.0;
    for (var j = 0u; j < n; j++) {
        acc += scores[j] * qkv[j * row + 2u * width + h * D + lid];
    }
    out[t * width + h * D + lid] = acc / total;
}
