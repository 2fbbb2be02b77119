// x as a uniform binding (X_SOURCE = "uniform": an activation of at most 64 KiB on a software adapter). lavapipe
// reads a uniform array at lane-varying indices as one gather a component, where a storage read loops over the lanes
// with a branch and a load each.

override X_VEC4: u32 = 1u;  // vec4s of x, T_MAX * K / 4: a uniform array has a size fixed at compilation

@group(0) @binding(2) var<uniform> x: array<vec4<f32>, X_VEC4>;   // [T_MAX, K]
