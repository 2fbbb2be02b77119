// lstm: the recurrence of a bidirectional single-layer LSTM (PyTorch's nn.LSTM, gate order i, f, g, o), given
// the input projections gx[t] = W_ih x[t] + b_ih + b_hh of both directions ([T, 8H]: forward gates then reverse).
//   gates = gx[t, d] + W_hh[d] h;  c = sigmoid(f) c + sigmoid(i) tanh(g);  h = sigmoid(o) tanh(c)
// starting from h = c = 0; the forward direction walks t = 0..T-1, the reverse T-1..0. Output y[t, d * H + u]
// through strides (row-major [T, 2H], a column slice of wider rows, or channel-major [2H, T]).
// Work split: one workgroup per direction (grid (2)), one invocation per hidden unit (H = 256); h lives in
// workgroup memory, each step reads the direction's W_hh [4H, H] once.
const H: u32 = 256u;

// params: 0 T, 1 y stride per t, 2 y stride per channel, 3 y offset; 63 is 0
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> gx: array<f32>;
@group(0) @binding(2) var<storage, read> whh: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

var<workgroup> h_shared: array<f32, H>;

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) u: u32) {
    let d = wid.x;
    let steps = p[0];
    h_shared[u] = 0.0;
    var c = 0.0;
    workgroupBarrier();
    let wbase = d * 4u * H * H;
    for (var s = 0u; s < steps; s++) {
        let t = select(s, steps - 1u - s, d == 1u);
        let gbase = t * 8u * H + d * 4u * H;
        var g = vec4<f32>(gx[gbase + u], gx[gbase + H + u], gx[gbase + 2u * H + u], gx[gbase + 3u * H + u]);
        for (var k = 0u; k < H; k++) {
            let hk = h_shared[k];
            g += hk * vec4<f32>(whh[wbase + u * H + k], whh[wbase + (H + u) * H + k],
                                whh[wbase + (2u * H + u) * H + k], whh[wbase + (3u * H + u) * H + k]);
        }
        c = sigmoid(g.y) * c + sigmoid(g.x) * tanh(g.z);
        let h = sigmoid(g.w) * tanh(c);
        workgroupBarrier();
        h_shared[u] = h;
        workgroupBarrier();
        y[p[3] + t * p[1] + (d * H + u) * p[2]] = h;
    }
}
