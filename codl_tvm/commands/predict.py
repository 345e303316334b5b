"""``codl-tvm profile``, ``train``, ``report``, ``calibrate`` (library: profiler, predictor)."""

from __future__ import annotations

from ..predictor import cli as pred
from ..profiler import cli as prof
from . import Command

COMMANDS = {
    "profile": Command("measure sub-op kernels and sharing costs on a pair",
                       prof.add_arguments, prof.run),
    "profile-bundle": Command("compile an offline profiling bundle to run elsewhere",
                              prof.add_bundle_arguments, prof.run_bundle_build),
    "profile-join": Command("join bundles built for one pair, measured interleaved (new "
                            "shapes beside control rows)", prof.add_join_arguments, prof.run_join),
    "train": Command("train a latency predictor from samples", pred.add_train_arguments,
                     pred.run_train),
    "report": Command("accuracy report of a predictor on samples", pred.add_report_arguments,
                      pred.run_report),
    "calibrate": Command("scale a predictor's kernel times to the machine at hand (a few "
                         "samples profiled there)", pred.add_calibrate_arguments,
                         pred.run_calibrate),
}
