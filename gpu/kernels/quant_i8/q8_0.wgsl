// Q8_0 blocks as int8 (quant_i8/block.wgsl; the layout is quant/q8_0.wgsl's): value = d q, q the
// stored signed byte.
#include "quant/q8_0.wgsl"
#include "quant_i8/block.wgsl"

const HALF_SCALES: bool = false;
const HAS_MIN: bool = false;

fn block_head_i8(row: u32, b: u32) -> vec4<u32> {
    return vec4<u32>();  // block_i8 reads its scales itself
}

fn block_i8(row: u32, b: u32, head: vec4<u32>) -> I8Block {
    let base = row + b * BLOCK_BYTES;
    let d = load_f16(base);
    return I8Block(load_16(base + 2u), load_16(base + 18u), vec3<f32>(d, d, 0.0));
}
