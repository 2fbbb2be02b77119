// One 32-value block of f32 as 8-bit integers, llama.cpp's Q8_1 quantisation of activations for its
// integer-dot kernels (kernels/quantize_q8.wgsl and the int8 matvec inputs, matvec/q8_input.wgsl, share it
// so that a prompt's and a decode step's activations round alike):
//   d = max |x_i| / 127,  q_i = round(x_i / d) in [-127, 127]  (q = 0 where d = 0),  sum = sum_i x_i (exact)
// q packed four to a word, value 4 w + j in byte j of word w (dot4I8Packed's order). Pure: no bindings.

struct Q8Block {
    lo: vec4<u32>,     // q of values 0..15
    hi: vec4<u32>,     // q of values 16..31
    scale: vec2<f32>,  // (d, sum)
}

fn q8_block(v: array<vec4<f32>, 8>) -> Q8Block {
    var amax = 0.0;
    var sum = 0.0;
    for (var j = 0u; j < 8u; j++) {
        let s = quad_stats(v[j]);
        amax = max(amax, s.x);
        sum += s.y;
    }
    let scale = q8_quad_scale(amax, sum);
    var words: array<u32, 8>;
    for (var j = 0u; j < 8u; j++) {
        words[j] = q8_quad_word(v[j], scale.x);
    }
    return Q8Block(vec4<u32>(words[0], words[1], words[2], words[3]),
                   vec4<u32>(words[4], words[5], words[6], words[7]), scale);
}

// The rule by quads (4 values): q8_block is these three steps over its 8 quads. Kernels may spread them over
// 8 invocations a block, each holding a quad, in two phases with a barrier between: each writes quad_stats(v)
// where the block's 8 quads can read them, then each takes q8_quad_scale of the 8 stats in order and packs its
// own word with q8_quad_word. Adding the quads' sums in order gives q8_block's sum bit for bit, without its
// arrays (which a compiler may keep in local memory when a single invocation walks a block).
fn quad_stats(v: vec4<f32>) -> vec2<f32> {  // (max |v|, sum of v)
    let a = abs(v);
    return vec2<f32>(max(max(a.x, a.y), max(a.z, a.w)), (v.x + v.y) + (v.z + v.w));
}

fn q8_quad_scale(amax: f32, sum: f32) -> vec2<f32> {  // (d, sum) of the block from its quads' stats
    return vec2<f32>(amax / 127.0, sum);
}

fn q8_quad_word(v: vec4<f32>, d: f32) -> u32 {
    let inv = select(0.0, 1.0 / d, d > 0.0);
    return pack4xI8(vec4<i32>(round(v * inv)));
}
