"""The tunable constants of the matrix kernels' planning (gpu/ops/matmul_plan.py), in one frozen object.

An Executor carries one (`Executor(device, tuning=...)`, DEFAULT_TUNING unless given); gpu/ops/matmul.py reads it as
`builder.executor.tuning` and passes it to planning. Tests and tuning sweeps inject a variant with
`dataclasses.replace(DEFAULT_TUNING, row_pairs=False)` rather than patching modules. The values were picked by
kernel sweeps and model A/B runs on an H100 and an H200 (lavapipe for the software adapters' fields); git log
holds the figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGMLQuantizationType

from gpu.ops.matmul_plan import MatmulTile, MatvecShape


@dataclass(frozen=True)
class MatmulTuning:
    """Every tunable constant of matmul planning, each with why it has its value."""

    # -- kernel by step length --
    # matvec's per-token loop over one read of the weights beats a tile up to this many tokens (kernels allow 8)
    matvec_max_tokens: int = 8
    # software adapters: longer steps take the whole-row matmul, whose time grows slowly with the tokens
    software_matvec_max_tokens: int = 1

    # -- matvec split (GPU adapters) --
    matvec_threads: int = 256  # threads a matvec workgroup aims at
    matvec_min_threads: int = 32  # never below one NVIDIA warp
    matvec_target_groups: int = 256  # workgroups wanted (about two an SM) before rows per workgroup may grow
    # the wide K-quant matvecs on a plain input: no prologue to repeat, so more, smaller workgroups pay
    wide_target_groups: int = 512
    matvec_groups_per_thread: int = 8  # most 16-value groups a thread takes per row: longer runs stall on loads
    # ... and most 32-value units in the wide K-quant kernels: Q4_K's, Q6_K's (its units cost more loads)
    q4_units_per_thread: int = 16
    q6_units_per_thread: int = 4
    # a one-token Q4_K gate-up's threads a row (each on a gate row's units and its up row's) whatever its units, more
    # only where few rows need them for matvec_target_threads: both more threads (the units rule above, on rows of
    # 4096 values) and fewer measured slower
    one_token_glu_tpr: int = 8
    matvec_target_threads: int = 65536  # threads wanted in all to hide memory latency (about 500 an SM)
    head_rows: int = 65536  # a matvec of this many rows is an output head: its rows alone give threads enough ...
    head_tpr: int = 4  # ... so it takes this many threads a row, each on a long run of units
    software_min_groups: int = 8  # whole-row matvec workgroups wanted: enough for every CPU core
    # Q4_K and Q6_K through their own kernels (32-value loads, scales per sub-block) rather than matvec.wgsl's
    wide_matvec: bool = True
    # threads of the wide kernels take two rows on one load of x (PAIRS): the loads of x bound long rows
    row_pairs: bool = True
    row_pairs_min_k: int = 4096  # one token: rows at least this long pair (shorter ones measured slower on Gemma 3)
    multi_token_pair_tpr: int = 32  # several tokens: paired rows take at least this many threads a row
    # steps of this many tokens or more run Q4_K with a row's lanes along each block's quant words (LANE_WORDS)
    q4_word_lanes_min_tokens: int = 4
    word_lanes_threads: int = 128  # workgroup size of the word-lane Q4_K matvec
    # steps of several tokens compute all the program's rows (EVERY_ROW: the loads of x for every token issue
    # together) in the Q4_K word-lane matvec, and in the Q6_K one up to this many tokens (at eight, the Llama 8B's
    # long rows ran several times slower); the other matvecs ran as fast or slower so
    every_row_word_lanes: bool = True
    every_row_q6_k_max_tokens: int = 4
    # steps of this many tokens or more interleave a workgroup's rows thread by thread, so threads share loads of x
    interleave_min_tokens: int = 4
    row_interleave: int = 8  # at most this many rows interleaved (a power of two dividing the workgroup's rows)
    # one-token steps interleave this many: neighbours' shared loads of x still pay, where more rows spread a warp's
    # weight loads over more cache lines than they save (steps of 2 and 3 tokens interleave none)
    one_token_row_interleave: int = 2
    # largest input a matvec workgroup normalises for itself (NormedInput): room beside the reduction under 32 KiB
    normed_input_bytes: int = 16 << 10
    # widest model width normalised that way: wider ones (Llama 8B's) ran faster normalised once by residual_norm,
    # every workgroup's prologue costing more than the dispatch it saves
    normed_input_max_width: int = 3072
    # one-token steps of models without post-norms: the matvec writing a block's output adds it to the residual and
    # writes the next norm's input with partial sums of squares, which the next matvecs reduce (PrenormedInput):
    # past the fold's width no residual_norm dispatch, and from prenormed_min_width on faster than the fold too,
    # whose prologue each workgroup repeats (narrower models keep the fold: their prologue is short). Steps of
    # several tokens measured slower so
    prenormed_inputs: bool = True
    prenormed_max_tokens: int = 1
    prenormed_min_width: int = 2048

    # -- int8 matvecs --
    q8_input_bytes: int = 16 << 10  # largest input an int8 matvec workgroup quantises into workgroup memory
    # Q4_K matvecs without GLU take the int8 kernel for rows up to this long (longer: the prologue reads too much)
    int8_matvec_max_k: int = 4096
    # ... and matrices of at least this many values, where the arithmetic saved outweighs the prologue; quantised
    # inputs kept between dispatches pay from this size too
    int8_matvec_min_values: int = 4 << 20

    # -- matmul tiles (prompts) --
    matmul_min_groups: int = 128  # workgroups wanted (about one an SM) before k is split further
    matmul_max_split: int = 8  # most parts k is split into
    matmul_part: int = 256  # k values a split part aims at: short k loops ran fastest
    matmul_min_part: int = 128  # k values a part keeps at least when splitting for workgroups
    # the GLU's steps of up to this many tokens split k into matmul_part parts as other matmuls do: their few token
    # tiles leave each workgroup a long k loop (longer steps keep k whole, or split it for workgroups)
    glu_part_split_max_tokens: int = 32
    matmul_max_parts_bytes: int = 96 << 20  # largest parts scratch a split may need
    int8_few_groups: int = 256  # int8 tiles split k only below this many workgroups (about two an SM) ...
    int8_split_groups: int = 512  # ... and then until there are this many
    # steps of 128 tokens or more: 8 x 8 a thread doubles the multiply-adds per workgroup-memory load of 4 x 8
    long_step_tile: MatmulTile = MatmulTile(128, 128, 8, 16, thread_tokens=8)
    # weight types whose tiles are f16 where the adapter has "shader-f16": none, NVIDIA converts each f16 read in an
    # extra instruction (F32 and BF16 would round coarsely or overflow in f16 anyway)
    f16_tile_types: frozenset[GGMLQuantizationType] = frozenset()
    # the k split in whole rounds of workgroups on GPUs of known SM count: a fit of the 8 x 8 tile's sweep, where
    pair_time: float = 1.75  # two workgroups sharing an SM take this many times one alone's time,
    split_k_steps: int = 127  # a split's reduce costs this many k steps of a lone workgroup,
    parts_bytes_per_k_step: int = 309_000  # and its parts cost a k step for this many bytes written and read back

    # -- forced choices (tests and kernel sweeps; None: the rules above decide) --
    tile: MatmulTile | None = None  # every f32/f16 matmul's tile and split
    int8_tile: MatmulTile | None = None  # every int8 matmul's tile and split
    # every GPU matvec's threads a row and rows a workgroup (word lanes too); row pairs, where taken, keep it
    matvec_split: MatvecShape | None = None
    int8_matvec_everywhere: bool = False  # int8 matvecs wherever they can run, not only where they pay


DEFAULT_TUNING = MatmulTuning()
