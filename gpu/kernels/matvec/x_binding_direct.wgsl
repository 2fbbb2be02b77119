// x as a storage binding (X_SOURCE = "direct").

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;   // [T_MAX, K]
