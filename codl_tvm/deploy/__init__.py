"""Deployment where users run: cross-compiled artifacts, RPC execution, the TVM plugin.

Submodules, imported on use (this package imports nothing so that :mod:`.plugin`, which
``import tvm`` loads through the ``tvm.backends`` entry point, stays cheap):

- :mod:`.cross`: :func:`~codl_tvm.deploy.cross.export_for_device` (Android: NDK ``.so`` or
  ``.tar`` of objects plus the link command). Needs the full TVM.
- :mod:`.rpc`: :func:`~codl_tvm.deploy.rpc.connect`, :class:`~codl_tvm.deploy.rpc.RemoteRunner`,
  :func:`~codl_tvm.deploy.rpc.load_remote`. Works with the TVM runtime only.
- :mod:`.server`: ``python -m codl_tvm.deploy.server``, a ``tvm.rpc`` server with codl-tvm's
  helpers registered (:mod:`.rpc_helpers`). Works with the TVM runtime only.
- :mod:`.plugin`: the ``tvm.backends`` entry point registering the ``"codl"`` Relax pipeline.
"""
