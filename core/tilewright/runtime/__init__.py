"""Run exported kernels without the compiler: ``tilewright.runtime.load(path)``.

A bundle is a folder written by ``kernel.export(path)``: ``manifest.json`` names its format,
version and files with their sizes and sha256 (see :mod:`tilewright.runtime.bundle` for every
check made before anything is loaded). Loading imports only the standard library, torch and
the bundle's device runtime (cuda-python for ``cubin`` bundles; for ``cpu-so`` bundles, a
small shim library built from :mod:`tilewright.runtime.cpu`'s C source) -- never TVM -- so
bundles run on machines that have no compiler.
"""

from __future__ import annotations

from .bundle import FORMAT, MANIFEST, VERSION, Bundle, BundleError, open_bundle


def load(path):
    """The kernel stored in bundle ``path``: call it like the compiled kernel (inputs in,
    outputs allocated and returned). A bundle that fails a check raises :class:`BundleError`
    naming the check, before anything is loaded."""
    bundle = open_bundle(path, required=("binary", "launch", "signature"))
    if bundle.manifest["binary"] == "cubin":
        from .cuda import BundleKernel  # cuda-python is imported only for CUDA bundles

        return BundleKernel.from_bundle(bundle)
    if bundle.manifest["binary"] == "cpu-so":
        from .cpu import CpuBundleKernel

        return CpuBundleKernel.from_bundle(bundle)
    raise BundleError(path, "binary", f"no loader for {bundle.manifest['binary']!r}")


__all__ = ["FORMAT", "MANIFEST", "VERSION", "Bundle", "BundleError", "load", "open_bundle"]
