// Workgroup tiles of matmul/tiles.wgsl in f16 (adapters with "shader-f16"): half the workgroup
// memory and half the bytes per tile load of f32 tiles; products and sums stay f32. Values past
// f16's range saturate at +-65504 rather than becoming infinite.
enable f16;

alias tile_t = f16;

fn to_tile(v: f32) -> f16 {
    return f16(clamp(v, -65504.0, 65504.0));
}
