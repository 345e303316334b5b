"""``codl-tvm compile``, ``codl-tvm run`` (here or on a ``tvm.rpc`` remote) and
``codl-tvm rpc-server``; and the command lines of a machine with only the TVM runtime, where
:mod:`codl_tvm.cli` cannot import (its other commands reach the compiler):

- ``python -m codl_tvm.runtime ARTIFACT``: ``codl-tvm run`` here (:func:`runtime_main`);
- ``python -m codl_tvm.deploy.server``: ``codl-tvm rpc-server`` (:func:`server_main`);
- ``python -m codl_tvm.planner.bundle DIR``: times what ``codl-tvm bench --bundle`` built
  (:func:`bundle_main`).

Each takes the arguments of its ``codl-tvm`` twin from the same function. This module imports
nothing beyond :mod:`codl_tvm.outputs` at import time, so those entry modules, which call it
from their ``__main__`` block, stay runtime-only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

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
                        "gpu_winograd=on|off, cpu_matmul=packed|streamed, "
                        "gpu_matmul=TABLE|dlight, gpu_prefetch=on|off, cpu_prepack=on|off "
                        "(off: the CPU kernels pack their weights on every call), "
                        "cpu_fast_math=on|off (off: exact scalar exp/erf/tanh on the CPU), "
                        "cpu_depthwise_blocks=on|off (off: the CPU's depthwise conv runs one "
                        "row per task, its padding and epilogue in passes of their own), "
                        "cpu_gemm_rows=on|off (off: with 16 vector registers the CPU 1x1 "
                        "GEMM keeps 3x3 accumulators, not 6x2), "
                        "cpu_winograd_panels=on|off (off: the CPU Winograd's transformed weight "
                        "interleaves its 16 elements instead of one panel per task), "
                        "cpu_gemm_fit=on|off (off: the CPU 1x1 GEMM's tile takes as many pixel "
                        "vectors as the pixels fill, however badly they fill its tiles), "
                        "cpu_matmul_rows=on|off (off: with 16 vector registers the CPU's packed "
                        "matmul keeps 4x4 accumulators, not 6x2), "
                        "cpu_gemm_in_place=on|off (off: the CPU 1x1 GEMM always packs its "
                        "input and unpacks its result in passes of their own), "
                        "cpu_depthwise_phases=on|off (off: the CPU's strided depthwise conv "
                        "reads each input vector lane by lane), "
                        "cpu_winograd_64x64=on|off (off: 3x3 convs of 64 to 64 channels run "
                        "the CPU's direct conv, not its Winograd), "
                        "cpu_even_tiles=on|off (off: the last register tile of the CPU's "
                        "direct conv and Winograd is padded to a full one); "
                        "recorded in the artifact's manifest.json")
    p.add_argument("--cuda-graph", action="store_true",
                   help="capture the kernels into CUDA graphs (replayed after the first run) "
                        "where the plan keeps the whole model on a CUDA GPU")
    p.add_argument("--no-fuse", action="store_true",
                   help="one kernel per op: no elementwise op runs inside the kernel before it")
    p.add_argument("--no-overlap", action="store_true",
                   help="one CUDA stream for kernels and copies (default on a CUDA GPU: "
                        "kernels on a stream of their own, a split's copies beside them)")
    p.add_argument("--guard", action="store_true",
                   help="also build the model on each processor alone; the runtime times them "
                        "against the plan where it loads the artifact and runs the fastest")
    p.add_argument("--block-copies", action=argparse.BooleanOptionalAction, default=None,
                   help="slice and join a split's rows with 2-D copies, the GPU's kernels on "
                        "the whole tensors (default on a CUDA GPU; plan with the same flag)")
    p.add_argument("--cpu-chunks", type=int, default=None, metavar="N",
                   help="run the CPU's part of a row split in at most N chunks, each copied "
                        "to the GPU while the next computes (default: 2 where copies overlap "
                        "kernels, else 1)")


def _run_compile(args: argparse.Namespace) -> int:
    from .. import DevicePair, Plan, compile
    from ..geometry import check_cpu_chunks
    from ..tiling import KernelVariants

    inputs = [args.model, *([args.plan] if args.plan else [])]
    variants = KernelVariants.parse(args.kernel_variant)  # a bad one: one line, nothing written
    check_cpu_chunks(args.cpu_chunks, "--cpu-chunks")
    check_output_folder(args.output, inputs, args.overwrite)  # before minutes of compiling
    mod = load_model(args)
    pair = DevicePair.parse(args.pair, arch=args.arch)
    plan = Plan.load(args.plan) if args.plan else None
    if plan is not None and plan.candidates and not args.guard:
        print(f"the plan's {len(plan.candidates)} candidates are built with --guard only; "
              "building the plan alone", file=sys.stderr)
    exe = compile(mod, pair, plan, variants=variants, fuse=not args.no_fuse,
                  cuda_graph=args.cuda_graph, overlap=False if args.no_overlap else None,
                  block_copies=args.block_copies, guard=args.guard,
                  cpu_chunks=args.cpu_chunks)
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


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """ARTIFACT, ``--inputs``, ``-o``, ``--time`` and ``--repeat``: ``codl-tvm run`` and
    ``python -m codl_tvm.runtime``."""
    p.add_argument("artifact")
    p.add_argument("--inputs", help=".npz keyed by input name (random when omitted)")
    p.add_argument("-o", "--output",
                   help="write outputs to this .npz, keyed by the model's output names")
    p.add_argument("--time", action="store_true", help="also print the median latency")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--adapt", action="store_true",
                   help="a guarded artifact keeps choosing its fastest alternative call after "
                        "call (keeps them all loaded; codl_tvm.adaptive_guard)")


def _add_run(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)
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
    if args.rpc or args.rpc_tracker:
        if args.adapt:
            raise ValueError("--adapt runs an artifact on this machine, not over RPC")
        _check_run_output(args)
        return _run_remote(args)
    return _run_here(args)


def _check_run_output(args: argparse.Namespace) -> None:
    if args.output:  # before any work: the outputs may not overwrite the inputs
        check_output_file(args.output, [args.inputs] if args.inputs else [])


def _run_here(args: argparse.Namespace) -> int:
    from .. import runtime

    _check_run_output(args)
    runtime.run_and_report(runtime.load(args.artifact, adapt=args.adapt), args.inputs,
                           args.output, args.time, args.repeat)
    return 0


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """``--host``, ``--port`` ... ``--spawn``: ``codl-tvm rpc-server`` and
    ``python -m codl_tvm.deploy.server``."""
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default %(default)s; 0.0.0.0 exposes a server "
                        "that runs any code a client sends)")
    p.add_argument("--port", type=int, default=9090)
    p.add_argument("--port-end", type=int, help="try ports up to this one (default PORT+100)")
    p.add_argument("--tracker", metavar="HOST:PORT", help="register with this tracker")
    p.add_argument("--key", default="", help="device key announced to the tracker")
    p.add_argument("--port-file", help="write the bound port here once listening")
    # not --verbose: codl-tvm's own --verbose (tracebacks) shares the namespace
    p.add_argument("--log-sessions", action="store_true", help="TVM's per-session log lines")
    p.add_argument("--spawn", action="store_true", default=None,
                   help="spawn each session (default: only where a CUDA driver is present)")


def _run_server(args: argparse.Namespace) -> int:
    from ..deploy import server

    state = server.start(args.host, args.port, args.port_end, args.tracker, args.key,
                         silent=not args.log_sessions, spawn=args.spawn)
    print(f"codl-tvm rpc server listening on {args.host}:{state.port}", flush=True)
    if args.port_file:
        write_text(args.port_file, str(state.port))
    state.thread.join()
    return 0


def _add_bundle(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", nargs="?", help="folder written by codl-tvm bench --bundle")
    p.add_argument("-o", "--output", default="bench-results.json")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--deadline-s", type=float, default=1e9)
    p.add_argument("--jobs", type=int, default=1, help="processes warming the CUDA kernels")
    p.add_argument("--models", help="comma-separated subset of the bundle's models")
    p.add_argument("--adapt", action="store_true",
                   help="guarded plans keep choosing their fastest alternative")
    # the warming processes of codl_tvm.planner.bundle.warm_artifacts
    p.add_argument("--warm", nargs="+", metavar="ARTIFACT", help=argparse.SUPPRESS)


def _run_bundle(args: argparse.Namespace) -> int:
    from ..planner import bundle

    if args.warm:
        bundle.load_artifacts(args.warm)
        return 0
    if not args.bundle:
        raise ValueError("the bundle folder is required")
    bundle.run(args.bundle, args.output, args.rounds, args.deadline_s, args.jobs,
               args.models.split(",") if args.models else None, adapt=args.adapt)
    return 0


def _runtime_only_main(prog: str, description: str,
                       add_arguments: Callable[[argparse.ArgumentParser], None],
                       run: Callable[[argparse.Namespace], int],
                       argv: list[str] | None) -> int:
    """Parse ``argv`` and run; a user error is one line on stderr and exit 1 (as
    :func:`codl_tvm.cli.main`, which a runtime-only process cannot import)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (OSError, KeyError, ValueError, RuntimeError) as err:
        text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
        print(f"{prog}: error: {text}", file=sys.stderr)
        return 1


def runtime_main(argv: list[str] | None = None) -> int:
    """``python -m codl_tvm.runtime ARTIFACT [--inputs x.npz] [-o out.npz] [--time]``."""
    return _runtime_only_main("python -m codl_tvm.runtime",
                              "run a compiled codl-tvm artifact with only the TVM runtime",
                              add_run_arguments, _run_here, argv)


def server_main(argv: list[str] | None = None) -> int:
    """``python -m codl_tvm.deploy.server [--host H] [--port P] [--tracker H:P --key K]``."""
    return _runtime_only_main("python -m codl_tvm.deploy.server",
                              "a TVM RPC server that co-executes codl-tvm artifacts "
                              "(runtime-only capable)", add_server_arguments, _run_server, argv)


def bundle_main(argv: list[str] | None = None) -> int:
    """``python -m codl_tvm.planner.bundle DIR -o results.json [--rounds N] [--jobs N]``."""
    return _runtime_only_main("python -m codl_tvm.planner.bundle",
                              "time an offline bench bundle (runtime-only)", _add_bundle,
                              _run_bundle, argv)


COMMANDS = {
    "compile": Command("compile a model into an artifact folder", _add_compile, _run_compile),
    "run": Command("run a compiled artifact", _add_run, _run_run),
    "rpc-server": Command("serve codl-tvm artifacts over tvm.rpc (runtime-only capable; on a "
                          "device without codl-tvm's CLI: python -m codl_tvm.deploy.server)",
                          add_server_arguments, _run_server),
}
