// The Q6_K matvecs' (matvec_q6_k.wgsl, matvec_q6_k_i8.wgsl) bytes of one unit: half h of a block, the 8
// consecutive l from l0 (quant/q6_k.wgsl has the layout). 8 bytes of ql at 64h + l0, 8 at 64h + 32 + l0 and 8
// of qh at 128 + 32h + l0 hold the 32 values 128h + 32a + l0 .. + 7 (a = 0..3) with four scales; every byte
// is read once. Q6_K blocks are 210 bytes, so a block starts 4-aligned or 2 bytes past; a unit's 8-byte
// spans load as three words and shift where needed. Needs the kernel's `q6_weight: array<u32>` binding.

const Q6_K_BLOCK_BYTES: u32 = 210u;

// The 8 bytes at an even offset as two words.
fn load_8(byte: u32) -> vec2<u32> {
    let i = byte >> 2u;
    let w0 = q6_weight[i];
    let w1 = q6_weight[i + 1u];
    if ((byte & 2u) == 0u) {
        return vec2<u32>(w0, w1);
    }
    let w2 = q6_weight[i + 2u];
    return vec2<u32>((w0 >> 16u) | (w1 << 16u), (w1 >> 16u) | (w2 << 16u));
}

struct Q6Unit {
    ql_a: vec2<u32>,     // low 4 bits: quarters 0 (low nibbles) and 2 (high)
    ql_b: vec2<u32>,     // quarters 1 and 3
    qh: vec2<u32>,       // high 2 bits: bits 2a, 2a + 1 of each byte for quarter a
    scales: vec4<f32>,   // each quarter's sub-block scale (int8)
    d: f32,
}

// The unit of the block at byte `block`, half h, l = l0 .. l0 + 7.
fn q6_k_unit(block: u32, h: u32, l0: u32) -> Q6Unit {
    var q: Q6Unit;
    q.ql_a = load_8(block + 64u * h + l0);
    q.ql_b = load_8(block + 64u * h + 32u + l0);
    q.qh = load_8(block + 128u + 32u * h + l0);
    // scales of sub-blocks 8h + 2a + l0 / 16: bytes s, s + 2, s + 4, s + 6 from s = 192 + 8h + l0 / 16
    let sc = load_8(block + 192u + 8u * h + (l0 / 16u & ~1u)) >> vec2<u32>(8u * (l0 / 16u & 1u));
    let signed = bitcast<vec4<i32>>(vec4<u32>(sc.x, sc.x >> 16u, sc.y, sc.y >> 16u) << vec4<u32>(24u));
    q.scales = vec4<f32>(signed >> vec4<u32>(24u));  // int8, sign-extended
    let d_word = q6_weight[(block + 208u) >> 2u] >> (8u * ((block + 208u) & 2u));
    q.d = unpack2x16float(d_word).x;
    return q;
}
