// Entry point and row sums of attention_prompt.wgsl, portable variant: each thread writes its four
// partial scores to workgroup memory and reads back its row's TPR of them (two barriers per quad of
// keys). The role `me` is the local invocation index. row_sum4 is called from workgroup-uniform
// control flow.

var<workgroup> row_parts: array<vec4<f32>, WG>;
var<private> row_me: u32;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    row_me = lid;
    prompt_main(wid.x + wid.y * nwg.x, lid);
}

fn row_sum4(v: vec4<f32>) -> vec4<f32> {
    row_parts[row_me] = v;
    workgroupBarrier();
    let first = row_me - row_me % TPR;
    var s = vec4<f32>();
    for (var i = 0u; i < TPR; i++) {
        s += row_parts[first + i];
    }
    workgroupBarrier();   // every thread has read its row's parts before the next quad rewrites them
    return s;
}
