"""``codl-tvm compile``, ``codl-tvm run`` (here or on a ``tvm.rpc`` remote) and
``codl-tvm rpc-server``."""

from __future__ import annotations

import argparse
import json

from ..outputs import check_output_file, check_output_folder, write_text
from . import Command, add_model_arguments, add_pair_arguments, load_model


def _add_compile(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    add_pair_arguments(p)
    p.add_argument("--plan", help="plan JSON (default: whole model on the GPU)")
    p.add_argument("-o", "--output", required=True,
                   help="artifact folder to create (never the working directory or a folder "
                        "holding the model)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace OUTPUT if it is an existing codl-tvm artifact")
    p.add_argument("--no-weights", action="store_true",
                   help="ship no weights (the runtime draws random ones: timing only)")
    p.add_argument("--cross", action="store_true",
                   help="cross-compile (implied by android-* pairs): lib.so through the NDK when "
                        "TVM_NDK_CC or --ndk-cc is set, else lib.tar plus the link command")
    p.add_argument("--ndk-cc", help="NDK compiler (default: $TVM_NDK_CC)")
    p.add_argument("--kernel-variant", action="append", default=[], metavar="KEY=VALUE",
                   help="build a kernel variant instead of the default (repeatable): "
                        "gpu_conv=tiled|tiled-v1|tiled-64|tiled-128|tiled-nosplitk|dlight (the "
                        "GPU conv's tile table, or DLight's implicit GEMM), "
                        "cpu_gemm=measured|always (always: every 1x1 conv on the CPU GEMM), "
                        "gpu_winograd=on|off; recorded in the artifact's manifest.json")
    p.add_argument("--cuda-graph", action="store_true",
                   help="capture the kernels into CUDA graphs (replayed after the first run) "
                        "where the plan keeps the whole model on a CUDA GPU")
    p.add_argument("--no-fuse", action="store_true",
                   help="one kernel per op: no elementwise op runs inside the kernel before it")
    p.add_argument("--no-overlap", action="store_true",
                   help="one CUDA stream for kernels and copies (default on a CUDA GPU: "
                        "kernels on a stream of their own, a split's copies beside them)")
    p.add_argument("--block-copies", action="store_true",
                   help="slice and join a split's rows with 2-D copies instead of kernels "
                        "(CUDA; pays on large activations at few SMs; plan with the same flag)")


def _run_compile(args: argparse.Namespace) -> int:
    from .. import DevicePair, Plan, compile
    from ..tiling import KernelVariants

    inputs = [args.model, *([args.plan] if args.plan else [])]
    variants = KernelVariants.parse(args.kernel_variant)  # a bad one: one line, nothing written
    check_output_folder(args.output, inputs, args.overwrite)  # before minutes of compiling
    mod = load_model(args)
    pair = DevicePair.parse(args.pair, arch=args.arch)
    plan = Plan.load(args.plan) if args.plan else None
    exe = compile(mod, pair, plan, variants=variants, fuse=not args.no_fuse,
                  cuda_graph=args.cuda_graph, overlap=False if args.no_overlap else None,
                  block_copies=args.block_copies)
    if args.cross or args.ndk_cc or pair.name.startswith("android"):
        from ..deploy.cross import export_for_device

        path = export_for_device(exe, args.output, weights=not args.no_weights,
                                 ndk_cc=args.ndk_cc, overwrite=args.overwrite,
                                 inputs=tuple(inputs))
    else:
        path = exe.export(args.output, weights=not args.no_weights, overwrite=args.overwrite,
                          inputs=inputs)
    print(f"wrote {path} (pair {pair.name}, {len(exe.manifest['params'])} weight tensors)")
    link = json.loads((path / "manifest.json").read_text()).get("link")
    if link:
        print(f"link on a machine with the NDK, inside {path}: {link}")
    return 0


def _add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("artifact")
    p.add_argument("--inputs", help=".npz keyed by input name (random when omitted)")
    p.add_argument("-o", "--output",
                   help="write outputs to this .npz, keyed by the model's output names")
    p.add_argument("--time", action="store_true", help="also print the median latency")
    p.add_argument("--repeat", type=int, default=20)
    add_rpc_arguments(p)


def add_rpc_arguments(p: argparse.ArgumentParser) -> None:
    """``--rpc``, ``--rpc-tracker``, ``--rpc-key``, ``--rpc-timeout`` (run on a remote)."""
    g = p.add_argument_group("remote execution (tvm.rpc)")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--rpc", metavar="HOST:PORT", help="run on this RPC server")
    where.add_argument("--rpc-tracker", metavar="HOST:PORT", help="ask this tracker for a server")
    g.add_argument("--rpc-key", help="device key to request from the tracker")
    g.add_argument("--rpc-timeout", type=float, default=30.0, metavar="S",
                   help="bound on connecting (seconds, default %(default)s)")


def _run_remote(args: argparse.Namespace) -> int:
    from .. import runtime
    from ..deploy import rpc

    session = rpc.connect(rpc=args.rpc, tracker=args.rpc_tracker, key=args.rpc_key,
                          timeout_s=args.rpc_timeout)
    runner = rpc.load_remote(session, args.artifact)
    runtime.run_and_report(runner, args.inputs, args.output, args.time, args.repeat, " (remote)")
    return 0


def _run_run(args: argparse.Namespace) -> int:
    from .. import runtime

    if args.output:  # before any work: the outputs may not overwrite the inputs
        check_output_file(args.output, [args.inputs] if args.inputs else [])
    if args.rpc or args.rpc_tracker:
        return _run_remote(args)
    runtime.run_and_report(runtime.load(args.artifact), args.inputs, args.output, args.time,
                           args.repeat)
    return 0


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
    from ..deploy import server

    state = server.start(args.host, args.port, args.port_end, args.tracker, args.key)
    print(f"codl-tvm rpc server listening on {args.host}:{state.port}", flush=True)
    if args.port_file:
        write_text(args.port_file, str(state.port))
    state.thread.join()
    return 0


COMMANDS = {
    "compile": Command("compile a model into an artifact folder", _add_compile, _run_compile),
    "run": Command("run a compiled artifact", _add_run, _run_run),
    "rpc-server": Command("serve codl-tvm artifacts over tvm.rpc (runtime-only capable; on a "
                          "device without codl-tvm's CLI: python -m codl_tvm.deploy.server)",
                          _add_server, _run_server),
}
