// get_rows (embedding lookup): out[t, :] = dequant(W[ids[t], :]) * SCALE for the step's first
// min(n_tokens, T_MAX) tokens whose id lies in this shard's rows [ROW_START, ROW_START + N_ROWS);
// a sharded weight takes one dispatch per shard and each writes only its own ids' rows.
// W is read as GGUF stores it (quant/${WEIGHT_TYPE}.wgsl decodes 16 values at a time).
// TOKEN_SOURCE: a row whose row-table entry says so (rows[t].z == 1, see common/rows.wgsl) takes
// its id from slot_tokens[rows[t].y], the token the GPU sampled last for its sequence, instead of
// ids[t]; a row with rows[t].z == 2 (an image's soft token) takes images[t] as it is, unscaled (the
// encoder's rows are already in the embedding space), written by the shard with ROW_START 0 alone;
// with IMAGE_ID set, such a row instead looks up IMAGE_ID (Gemma 4's per-layer embeddings take the
// pad token's row for an image's or audio clip's rows, as transformers' Gemma4Model does).
// Without TOKEN_SOURCE, rows, slot_tokens and images are bound but not read.
//
// Work split: one workgroup per token; its 64 threads dequantise the row's 16-value groups
// lid, lid + 64, ... and write them as four vec4 each.
#include "common/step.wgsl"
#include "quant/bytes.wgsl"
#include "quant/${WEIGHT_TYPE}.wgsl"

override K: u32 = 256u;        // values per weight row (and per out row), a multiple of BLOCK_VALUES
override N_ROWS: u32 = 1u;     // rows in this shard
override ROW_START: u32 = 0u;  // id of the shard's first row
override T_MAX: u32 = 1u;      // rows of ids and out: the program's tokens per step
override SCALE: f32 = 1.0;     // factor on every value (Gemma: sqrt(d_model))
override TOKEN_SOURCE: bool = false;
override IMAGE_ID: u32 = 0xffffffffu;  // the id an image row looks up; unset (all ones): it takes images[t]

const WG: u32 = 64u;
const ROW_BYTES: u32 = K / BLOCK_VALUES * BLOCK_BYTES;
const GROUPS_PER_BLOCK: u32 = BLOCK_VALUES / GROUP_VALUES;
const GROUPS_PER_ROW: u32 = K / GROUP_VALUES;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> ids: array<u32>;              // [T_MAX] token ids
@group(0) @binding(2) var<storage, read> weight: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;  // [T_MAX, K]
@group(0) @binding(4) var<storage, read> rows: array<vec4<u32>>;       // [T_MAX] (position, slot, source, -)
@group(0) @binding(5) var<storage, read> slot_tokens: array<u32>;      // [slots] last sampled token
@group(0) @binding(6) var<storage, read> images: array<vec4<f32>>;     // [T_MAX, K] image rows' embeddings

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = wid.x + wid.y * nwg.x;
    if (t >= min(step.n_tokens, T_MAX)) {
        return;
    }
    var id = ids[t];
    if (TOKEN_SOURCE) {
        let row = rows[t];
        if (row.z == 1u) {
            id = slot_tokens[row.y];
        } else if (row.z == 2u && IMAGE_ID != 0xffffffffu) {
            id = IMAGE_ID;
        } else if (row.z == 2u) {
            if (ROW_START == 0u) {
                for (var i = lid; i < K / 4u; i += WG) {
                    out[t * K / 4u + i] = images[t * K / 4u + i];
                }
            }
            return;
        }
    }
    if (id < ROW_START || id - ROW_START >= N_ROWS) {
        return;
    }
    let row_base = (id - ROW_START) * ROW_BYTES;
    for (var gi = lid; gi < GROUPS_PER_ROW; gi += WG) {
        let w = dequant16(row_base + (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES, gi % GROUPS_PER_BLOCK);
        let o = (t * K + gi * GROUP_VALUES) / 4u;
        out[o] = w[0] * SCALE;
        out[o + 1u] = w[1] * SCALE;
        out[o + 2u] = w[2] * SCALE;
        out[o + 3u] = w[3] * SCALE;
    }
}
