"""Build the Cython extensions of bkfast.

Every .pyx under bkfast/ is compiled on `pip install .` and `pip install -e .`. The extensions are
required: bkfast's hot paths have no silent pure-Python fallback in production (the pure-Python
reference codec exists as a test oracle and benchmark baseline, not as a runtime substitute).
"""
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent

extensions = [
    Extension(
        ".".join(pyx.with_suffix("").parts),
        [str(pyx)],
        include_dirs=[str(pyx.parent)],
        extra_compile_args=["-O3"],
    )
    for pyx in sorted(Path("bkfast").rglob("*.pyx"))
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "initializedcheck": False,
            "cdivision": True,
            "embedsignature": True,
        },
    ),
)
