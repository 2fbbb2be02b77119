"""The `hearth` command: `hearth serve` runs the API server, `hearth generate` completes one prompt.

    hearth serve [--host H] [--port P] [--config FILE] [--api-key KEY]
    hearth generate [--model PATH_OR_NAME] [--max-tokens N] [--temperature T] "prompt"
    hearth profile [--model PATH_OR_NAME] [--prompt-tokens N] [--batch B]
    hearth convert SOURCE OUTPUT.gguf [--voices FILE ...] [--vocab config.json] [--f32]
    hearth adapters

`generate` prints only the generated text on stdout, as it is produced; the loading progress bar and
any messages go to stderr. Without --model it uses the shipped Gemma 3 270M (`gemma-3-270m`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from config.settings import SHIPPED_MODEL, SettingsError, load_settings

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


COMMANDS = ("serve", "adapters", "generate", "profile", "convert")  # _parser's subcommands, for `python -m server`


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hearth", description="OpenAI-compatible local inference on wgpu")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the OpenAI-compatible HTTP server")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1; env HEARTH_HOST)")
    serve.add_argument("--port", type=int, help="port (default 8000; env HEARTH_PORT)")
    serve.add_argument("--config", type=Path,
                       help="TOML settings file (default: env HEARTH_CONFIG, else config/hearth.toml if present)")
    serve.add_argument("--api-key", help="require `Authorization: Bearer KEY` on /v1 (env HEARTH_API_KEY)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--adapters", help="run each chat model on these GPUs, one replica each: indices of "
                       "`hearth adapters`, names, or 'all' (env HEARTH_ADAPTERS)")

    commands.add_parser("adapters", help="list the GPU adapters by the index `--adapters` takes")

    gen = commands.add_parser("generate", help="complete one prompt and print the generated text")
    gen.add_argument("prompt", help="the prompt text (completed as is; --chat wraps it in the chat template)")
    gen.add_argument("--model", default=SHIPPED_MODEL,
                     help=f"a GGUF path, an Ollama name (gemma3:270m) or {SHIPPED_MODEL!r} (the default)")
    gen.add_argument("--max-tokens", type=int, default=128, help="most tokens to generate (default 128)")
    gen.add_argument("--temperature", type=float, default=1.0, help="0 is greedy (default 1.0)")
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0, help="0 turns it off")
    gen.add_argument("--seed", type=int, help="same seed and prompt, same output")
    gen.add_argument("--chat", action="store_true", help="treat the prompt as a user message of a chat")

    prof = commands.add_parser("profile", help="GPU time per kernel of a prefill step and a decode step")
    prof.add_argument("--model", default=SHIPPED_MODEL, help="as for generate")
    prof.add_argument("--prompt-tokens", type=int, default=512, help="prefill length, then decode at that position")
    prof.add_argument("--batch", type=int, default=32, help="also profile a decode step of this many sequences")

    conv = commands.add_parser("convert", help="convert Kokoro weights (.pth, .onnx) and voicepacks to Hearth's GGUF")
    conv.add_argument("source", help="kokoro-v1_0.pth, a Kokoro .onnx (fp32 or int8), or 'kokoro' (the shipped one)")
    conv.add_argument("output", type=Path, help="the GGUF to write")
    conv.add_argument("--voices", type=Path, action="append", default=[],
                      help="voicepacks: .npz, voices-v1.0.bin or .pt (repeatable)")
    conv.add_argument("--vocab", type=Path, help="upstream config.json (its `vocab`), else the shipped vocab.json")
    conv.add_argument("--f32", action="store_true", help="keep matrices in F32 (default F16)")
    return parser


def serve(args: argparse.Namespace) -> int:
    """Run uvicorn on the app until interrupted."""
    import uvicorn

    from server.app import create_app
    from server.request_context import configure_logging

    overrides = {"host": args.host, "port": args.port, "api_key": args.api_key, "log_level": args.log_level,
                 "adapters": args.adapters}
    try:
        settings = load_settings(args.config, overrides=overrides)
    except SettingsError as error:
        print(f"hearth: {error}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)  # every line carries its request id
    # SIGTERM (docker stop, Kubernetes) is how this server is asked to stop, not a failure: exit with status 0.
    # uvicorn handles it while it runs and raises it again once it has shut down, which lands here.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    # On SIGTERM uvicorn stops accepting, gives running requests shutdown_timeout_s to end, then cancels them
    # (their jobs stop at the model's next step) and the lifespan stops the workers (server/model_manager.py).
    # log_config=None keeps the logging setup; the request middleware writes the access lines (ids and times).
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level,
                log_config=None, access_log=False, timeout_graceful_shutdown=settings.limits.shutdown_timeout_s)
    return 0


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def resolve_model(name: str) -> str:
    """What load_text_model takes for a --model value: the shipped name, a path, or an Ollama blob."""
    if name == SHIPPED_MODEL or Path(name).expanduser().is_file():
        return name
    from models import ollama

    found = ollama.find_model(name)
    if found is None:
        raise SystemExit(f"hearth: no model {name!r} (not {SHIPPED_MODEL!r}, not a file, not in the Ollama store)")
    return str(found.path)


def generate_text(args: argparse.Namespace) -> int:
    """Load the model with a progress bar on stderr, then stream the completion to stdout."""
    from tqdm import tqdm

    from models.text.engine import load_text_model
    from models.text.generate import generate
    from models.text.sampler import SamplingParams
    from server.chat_worker import chat_template_of
    from server.text_stream import TextStream

    if args.max_tokens < 1:
        raise SystemExit(f"hearth generate: --max-tokens must be at least 1, not {args.max_tokens}")
    try:  # before the model loads, so that a bad setting fails at once
        sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed)
    except ValueError as error:
        raise SystemExit(f"hearth generate: {error}") from None
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, stream=sys.stderr)
    # The bar shows from the start; its total arrives with the loader's first report (bytes of weights).
    bar = tqdm(desc=f"loading {args.model}", unit="B", unit_scale=True, file=sys.stderr, leave=False)

    def progress(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        model = load_text_model(resolve_model(args.model), progress=progress)
    finally:
        bar.close()
    tokenizer = model.tokenizer
    text, add_bos = args.prompt, True
    if args.chat:
        template = chat_template_of(tokenizer)
        text = template.render([{"role": "user", "content": text}])
        add_bos = not (template.bos_token and text.startswith(template.bos_token))
    prompt_ids = tokenizer.encode(text, add_bos=add_bos)
    if len(prompt_ids) + args.max_tokens > model.context_length:
        raise SystemExit(f"hearth: {len(prompt_ids)} prompt tokens + {args.max_tokens} exceed the context of "
                         f"{model.context_length}")
    stream: TextStream[None] = TextStream(tokenizer.stream_decoder())
    session = model.new_session()
    try:
        for token in generate(model, session, prompt_ids, sampling, args.max_tokens):
            sys.stdout.write(stream.push(token.id).text)
            sys.stdout.flush()
        sys.stdout.write(stream.flush().text)
    finally:
        session.close()
    if sys.stdout.isatty():  # keep the shell prompt off the text; piped output stays exactly the text
        sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


def profile(args: argparse.Namespace) -> int:
    """Print where a step's GPU time goes, per kernel variant, from timestamp queries: a prefill of
    --prompt-tokens tokens, then decode steps of 1 and --batch sequences at that position."""
    import numpy as np

    from gpu.profile import profile_report
    from models.text.engine import PAGE_TOKENS, PREFILL_BUCKETS, load_text_model

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    batch, most = max(args.batch, 1), max(1, min(args.prompt_tokens, PREFILL_BUCKETS[-1]))
    # a pool for every sequence's prompt and the page its next token opens: the default one (two contexts) may hold
    # the prompts alone and leave the decode step no page
    model = load_text_model(resolve_model(args.model), max_batch=batch, pool_tokens=batch * (most + PAGE_TOKENS))
    n = min(most, model.context_length - 1)
    ids = [int(i) for i in np.random.default_rng(0).integers(10, model.vocab_size, n)]
    engine = model.engine()
    sessions = [model.new_session() for _ in range(batch)]
    try:
        for s in sessions:  # fill the caches so decode attends over n keys
            engine.submit_prefill(s, ids).wait()
        sessions[0].reset()
        print(profile_report(model.executor, "prefill", *engine.stage_prefill(sessions[0], ids)))
        sessions[0].n_past = n
        for b in sorted({1, batch}):
            label = f"decode of {b} sequence(s) at position {n}"
            print(profile_report(model.executor, label, *engine.stage_decode(sessions[:b])))
    finally:
        for s in sessions:
            s.close()
    return 0


def convert_kokoro(args: argparse.Namespace) -> int:
    """`hearth convert`: Kokoro weights and voicepacks -> our GGUF (models/kokoro/convert.py)."""
    import shutil

    from models.kokoro.convert import ConvertError, convert, converted_model_path

    say = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    try:
        if args.source == "kokoro" and not args.voices:
            shutil.copyfile(converted_model_path("kokoro", progress=say), args.output)
        else:
            convert(args.source, args.output, voices=args.voices, vocab=args.vocab, f16=not args.f32, progress=say)
    except (ConvertError, OSError, ValueError) as error:
        print(f"hearth convert: {error}", file=sys.stderr)
        return 1
    return 0


def list_adapters() -> int:
    """Print the adapters as `--adapters` and HEARTH_ADAPTERS number them, and which ones 'all' means."""
    from gpu.device import list_adapters as adapters
    from gpu.device import resolve_adapters

    everything = adapters()
    chosen = {a.index for a in resolve_adapters(["all"], everything)} if everything else set()
    for adapter in everything:
        print(f"{adapter.index}: {adapter.name} ({adapter.adapter_type}){'  [all]' if adapter.index in chosen else ''}")
    return 0 if everything else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `hearth` console script."""
    args = _parser().parse_args(argv)
    if args.command == "adapters":
        return list_adapters()
    if args.command == "serve":
        return serve(args)
    if args.command == "profile":
        return profile(args)
    if args.command == "convert":
        return convert_kokoro(args)
    return generate_text(args)


if __name__ == "__main__":
    sys.exit(main())
