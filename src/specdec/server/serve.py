"""``specdec serve``: build the engine from the command line and run uvicorn.

Engine options (``--model``, ``--speculative-method``...) are the shared ones of
:func:`specdec.cli.options.add_engine_arguments`; this module adds the server's own.
"""

from __future__ import annotations

import argparse
import os
import sys

from specdec.cli.options import engine_kwargs, field_default
from specdec.config import EngineConfig
from specdec.server.options import ServerOptions

API_KEY_ENV = "SPECDEC_API_KEY"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                        help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV})")
    parser.add_argument("--served-model-name", default=None,
                        help="the model id clients send (default: --model, or the bundled "
                             "model's name)")
    parser.add_argument("--plugin", action="append",
                        default=field_default(EngineConfig, "plugins"),
                        help="plugin that must be loaded (name of an installed one; repeatable)")
    parser.add_argument("--disable-plugin", action="append",
                        default=field_default(EngineConfig, "disable_plugins"),
                        help="block a plugin by name (repeatable)")
    parser.add_argument("--log-level", default="info")
    defaults = ServerOptions()
    parser.add_argument("--max-request-bytes", type=int, default=defaults.max_request_bytes,
                        help="larger request bodies get HTTP 413 (default: 8 MiB)")
    parser.add_argument("--trust-request-chat-template", action="store_true",
                        help="accept a chat_template in requests (rendered sandboxed, "
                             "time-limited); refused with 400 otherwise")
    parser.add_argument("--chat-template-timeout", type=float,
                        default=defaults.template_timeout_s,
                        help="seconds a chat template may take to render")
    parser.add_argument("--stream-stall-timeout", type=float,
                        default=defaults.stream_stall_timeout_s,
                        help="abort a request whose client stopped reading for this many "
                             "seconds (it is paused meanwhile)")


def server_options(args: argparse.Namespace) -> ServerOptions:
    return ServerOptions(max_request_bytes=args.max_request_bytes,
                         trust_request_chat_template=args.trust_request_chat_template,
                         template_timeout_s=args.chat_template_timeout,
                         stream_stall_timeout_s=args.stream_stall_timeout)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The shared engine flags plus the server's ``--plugin`` / ``--disable-plugin``."""
    return EngineConfig(**engine_kwargs(args), plugins=list(args.plugin),
                        disable_plugins=list(args.disable_plugin))


def main(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    import uvicorn

    from specdec import isa
    from specdec.engine import LLMEngine
    from specdec.engine.gc_pause import freeze_startup_heap
    from specdec.server.app import create_app

    engine = LLMEngine(engine_config(args))
    print(f"specdec serve: {isa.engine_summary(engine.stats())}", file=sys.stderr, flush=True)
    app = create_app(engine, model_name=args.served_model_name, api_key=args.api_key,
                     options=server_options(args))
    freeze_startup_heap()  # this process serves this engine until it exits
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
