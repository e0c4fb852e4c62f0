"""The C extension, declared here because pyproject's ext-modules table is still experimental in
setuptools; everything else about the package is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[
    # The produce validator's hot loop; needs a C compiler and libdeflate's headers (Debian:
    # build-essential, libdeflate-dev; `make` installs them when missing).
    Extension("protocol._fastscan", ["protocol/_fastscan.c"], libraries=["deflate"],
              extra_compile_args=["-O3", "-std=c11"]),
])
