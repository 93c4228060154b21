"""Builds airlock._airlock, the extension over libairlock.

Where the library comes from, first match wins:
  AIRLOCK_BUILD=DIR   a built tree: DIR/libairlock.so and DIR/../include
                      (make python sets it; the module gets DIR as its rpath);
  pkg-config airlock  an installed library (make install writes airlock.pc);
                      the module gets its libdir as its rpath, unless that is
                      a folder the loader searches by itself (/usr/lib, ...);
  ../build            the tree this folder sits in, when it has been built.
The extension is always compiled and linked afresh: setuptools would keep a
module in build/ whose C source is older than it, even one linked against
another library (make python's, with the checkout as its rpath and the
checkout's program as its template), and pip install would ship it.
The airlock command next to the library (DIR/airlock, or EXEC_PREFIX/bin/airlock)
runs the sandbox's template: Python itself is not linked with libairlock.
The Python headers are the interpreter's own (python3-dev on Debian).
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

here = os.path.dirname(os.path.abspath(__file__))

# The folders the dynamic loader searches without being told (ld.so's
# trusted folders): an rpath to them would only be noise.
LOADER_DIRS = {"/lib", "/usr/lib", "/lib64", "/usr/lib64"}


def loader_dir(d):
    d = os.path.normpath(d)
    return d in LOADER_DIRS or os.path.dirname(d) in ("/lib", "/usr/lib") and \
        os.path.basename(d).endswith("-linux-gnu")


class always_build_ext(build_ext):
    """build_ext that never keeps an earlier build: which library the module
    is linked against (its rpath) and which program runs its template are
    not among the dependencies setuptools compares."""

    def finalize_options(self):
        super().finalize_options()
        self.force = True


def library_flags():
    build = os.environ.get("AIRLOCK_BUILD")
    if not build:
        try:
            cflags = subprocess.run(["pkg-config", "--cflags", "airlock"], check=True,
                                    capture_output=True, text=True).stdout
            libs = subprocess.run(["pkg-config", "--libs-only-L", "airlock"], check=True,
                                  capture_output=True, text=True).stdout
            prefix = subprocess.run(["pkg-config", "--variable=exec_prefix", "airlock"],
                                    check=True, capture_output=True, text=True).stdout.strip()
            incs = [f[2:] for f in shlex.split(cflags) if f.startswith("-I")]
            libdirs = [f[2:] for f in shlex.split(libs) if f.startswith("-L")]
            rpath = [d for d in libdirs if not loader_dir(d)]
            return incs, libdirs, rpath, os.path.join(prefix, "bin", "airlock")
        except (OSError, subprocess.CalledProcessError):
            build = os.path.join(here, "..", "build")
    build = os.path.abspath(build)
    include = os.path.join(os.path.dirname(build), "include")
    if not os.path.exists(os.path.join(include, "airlock.h")):
        include = os.path.join(here, "..", "include")
    return [os.path.abspath(include)], [build], [build], os.path.join(build, "airlock")


def project_version(include_dirs):
    """The one version of the project: AIRLOCK_VERSION in airlock.h."""
    for d in include_dirs:
        try:
            with open(os.path.join(d, "airlock.h")) as f:
                for line in f:
                    if line.startswith("#define AIRLOCK_VERSION "):
                        return line.split('"')[1]
        except OSError:
            continue
    raise SystemExit("setup.py: airlock.h (AIRLOCK_VERSION) not found in %s" % include_dirs)


incs, libdirs, rpath, program = library_flags()

setup(
    version=project_version(incs),
    cmdclass={"build_ext": always_build_ext},
    ext_modules=[
        Extension(
            "airlock._airlock",
            sources=["src/_airlock.c"],
            include_dirs=incs,
            library_dirs=libdirs,
            runtime_library_dirs=rpath,
            libraries=["airlock"],
            # The program that runs the sandbox's template (airlock.h,
            # airlock_set_template_program): the airlock command of the same
            # build; AIRLOCK_TEMPLATE_PROGRAM in the environment overrides it.
            define_macros=[("AIRLOCK_TEMPLATE_PROGRAM", '"%s"' % program.replace('"', '\\"'))],
            extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                                "-Wno-missing-field-initializers", "-Wno-unused-parameter",
                                "-Wno-cast-function-type"],
        )
    ],
)
