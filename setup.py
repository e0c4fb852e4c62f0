"""The C extension, declared here because pyproject's ext-modules table is still experimental in
setuptools; everything else about the package is in pyproject.toml.

The extension is optional (protocol/native.py): without a C compiler the build skips it with a
warning and the package runs on its pure-Python paths. With libdeflate's headers (Debian:
libdeflate-dev, which `make` installs) its CRC-32 comes from libdeflate; otherwise from the
table-driven one in the C file itself, so the extension needs nothing beyond a compiler.
"""

import os

from setuptools import Extension, setup


def _has_libdeflate() -> bool:
    """Whether a program calling libdeflate_crc32 compiles and links here."""
    import tempfile

    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.errors import CCompilerError, DistutilsError

    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "probe.c")
        with open(source, "w") as f:
            f.write(
                "#include <libdeflate.h>\n"
                'int main(void) { return (int)libdeflate_crc32(0, "", 0); }\n'
            )
        compiler = new_compiler()
        try:
            objects = compiler.compile([source], output_dir=tmp)
            compiler.link_executable(objects, os.path.join(tmp, "probe"), libraries=["deflate"])
        except (CCompilerError, DistutilsError, OSError):
            return False
    return True


_libdeflate = os.environ.get("CHRONOLOG_NO_LIBDEFLATE") is None and _has_libdeflate()
setup(
    ext_modules=[
        Extension(
            "protocol._fastscan",
            ["protocol/_fastscan.c"],
            optional=True,
            libraries=["deflate"] if _libdeflate else [],
            define_macros=[("HAVE_LIBDEFLATE", "1")] if _libdeflate else [],
            extra_compile_args=["-O3", "-std=c11"],
        ),
    ]
)
