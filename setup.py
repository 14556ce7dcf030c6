"""Build the Cython core; everything else is declared in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("dlpack._core", ["src/dlpack/_core.pyx"], include_dirs=["src/dlpack/include"],
                   extra_compile_args=["-O2"])],
        compiler_directives={
            "language_level": 3,
            "cdivision": True,
            "embedsignature": True,
            "autotestdict": False,
        },
    ),
)
