"""``codl-tvm rpc-server``: serve codl-tvm artifacts over ``tvm.rpc`` (see :mod:`.server`).

The RPC flags of ``codl-tvm run`` live in :mod:`codl_tvm.commands.artifact`
(:func:`~codl_tvm.commands.artifact.add_rpc_arguments`, reusable by other commands).
"""

from __future__ import annotations

import argparse

from ..commands import Command


def _add_server(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default %(default)s; 0.0.0.0 exposes a server "
                        "that runs any code a client sends)")
    p.add_argument("--port", type=int, default=9090)
    p.add_argument("--port-end", type=int, help="try ports up to this one (default PORT+100)")
    p.add_argument("--tracker", metavar="HOST:PORT", help="register with this tracker")
    p.add_argument("--key", default="", help="device key announced to the tracker")
    p.add_argument("--port-file", help="write the bound port here once listening")


def _run_server(args: argparse.Namespace) -> int:
    from . import server

    argv = ["--host", args.host, "--port", str(args.port)]
    for flag, value in (("--port-end", args.port_end), ("--tracker", args.tracker),
                        ("--key", args.key), ("--port-file", args.port_file)):
        if value:
            argv += [flag, str(value)]
    return server.main(argv)


COMMANDS = {
    "rpc-server": Command("serve codl-tvm artifacts over tvm.rpc (runtime-only capable)",
                          _add_server, _run_server),
}
