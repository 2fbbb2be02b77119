// Workgroup tiles of matmul/tiles.wgsl in f32 (every adapter; F32 and BF16 weights, whose values
// f16 would round or overflow).

alias tile_t = f32;

fn to_tile(v: f32) -> f32 {
    return v;
}
